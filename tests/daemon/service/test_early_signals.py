"""``memstrata run`` notes a SIGHUP or SIGTERM from its first moment, before its CLI is imported (issue 45:
a reload 0.3 s after the start, on a loaded host, came before the CLI had installed its handler)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

# the command's own first step, then a SIGHUP to itself, then what the handler holds: nothing else imported.
# SIGHUP's default first: a test run under nohup (or any parent that ignores it) hands its children SIGHUP
# ignored, and a command that is not the daemon then keeps that (it failed so in a `nohup make test`).
PROBE = (
    "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
    "from daemon.service.early_signals import early_signals, install_for; "
    "install_for(sys.argv[1:]); os.kill(os.getpid(), signal.SIGHUP); "
    "print(early_signals.take(), 'daemon.front.cli' in sys.modules)"
)


@pytest.mark.parametrize(
    ("args", "noted"),
    [
        (["run"], True),
        (["--config", "/etc/memstrata/memstrata.yaml", "run"], True),
        (["--config=/x.yaml", "-v", "run"], True),
        (["status"], False),
        (["note", "run"], False),  # a note whose text is "run" is no daemon
        (["--config", "run", "status"], False),  # a configuration file named run
    ],
)
def test_only_the_daemon_notes_an_early_sighup(args, noted):
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO_ROOT, capture_output=True, text=True)
    if noted:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [f"[{int(signal.SIGHUP)}]", "False"], proc.stdout
    else:
        assert proc.returncode == -signal.SIGHUP, (proc.returncode, proc.stdout)  # the default: the command ends
