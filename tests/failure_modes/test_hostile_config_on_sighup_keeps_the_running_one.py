"""A hostile configuration file on SIGHUP: refused with file and line, the running one stays.

Before the fix a 3,000-deep ``[[[…]]]`` killed the daemon (RecursionError is not a
YAMLError), and a 9×9 alias bomb hung its main loop in the duplicate-key walk, so
SIGTERM no longer worked.  Each hostile version is sent to a real daemon with a
real SIGHUP; it must be refused quickly, the running configuration must keep
working, ``memstrata status`` must answer, and SIGTERM must still end the daemon.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from daemon.front.daemon_client import DaemonClient
from tests.failure_modes.hostile_yaml import HOSTILE, restore
from tests.helpers import FAST, MEMSTRATA, committed, init_root, wait_for

pytestmark = pytest.mark.slow


def admin_status(daemon, root) -> dict:
    token = (root / "state" / "admin.token").read_text().strip()
    with DaemonClient(daemon.socket, timeout=10, token=token) as client:
        return client.status()


def test_hostile_config_on_sighup_keeps_the_running_one(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"}, conversation={"enabled": False})
    good = config.read_text()
    ws = tmp_path / "workspace"
    daemon = daemons(config)

    for n, (name, (write, says)) in enumerate(HOSTILE.items(), start=1):
        write(config, good)
        daemon.signal(signal.SIGHUP)
        wait_for(
            lambda n=n: daemon.log().count("reload failed") >= n,
            timeout=30,
            what=f"{name}: the reload refused\n{daemon.log()}",
        )
        assert daemon.proc.poll() is None, f"{name}: the daemon died\n{daemon.log()}"
        error = admin_status(daemon, tmp_path)["daemon"]["config_error"]
        assert str(config) in error and says in error, (name, error)
        if name != "a FIFO" and name != "oversized":  # those are refused before a line exists
            assert re.search(r"\(line \d+\)", error), (name, error)

        # memstrata status never hangs on the bad file: it says what is wrong with it, in one go.
        started = time.monotonic()
        proc = subprocess.run(
            [*MEMSTRATA, "--config", str(config), "status"], capture_output=True, text=True, timeout=60
        )
        assert time.monotonic() - started < 60
        assert "Traceback" not in proc.stderr and str(config) in proc.stderr and says in proc.stderr, proc.stderr

        # The running configuration still works: an edit is committed.
        daily = ws / "memory" / f"2026-11-{n:02d}.md"
        daily.write_text(f"note written while the file was {name}\n")
        wait_for(lambda d=daily: committed(ws, "A", f"memory/{d.name}"), what=f"{name}: still committing")
        restore(config, good)

    # A good file is taken again, and the error clears.
    daemon.signal(signal.SIGHUP)
    wait_for(lambda: "configuration reloaded" in daemon.log(), what="the good file reloaded")
    wait_for(lambda: admin_status(daemon, tmp_path)["daemon"]["config_error"] is None, what="error cleared")

    assert daemon.stop(timeout=15) == 0, daemon.log()
