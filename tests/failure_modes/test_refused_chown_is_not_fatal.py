"""A chown the kernel refuses (EPERM, as under systemd's SystemCallFilter) never stops the daemon.

Before the fix the daemon, issuing a token into a workspace owned by another user,
died at start with PermissionError from os.chown.  Here the daemon runs as root
without CAP_CHOWN (``setpriv --bounding-set=-chown``): a real EPERM.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests import helpers
from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, init_root, run_cli, wait_for

WITHOUT_CHOWN = ["setpriv", "--bounding-set=-chown", sys.executable, "-m", "daemon"]


def test_daemon_without_chown_capability_issues_tokens_and_keeps_committing(tmp_path, daemons, monkeypatch):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    beta = tmp_path / "workspace" / "agents" / "beta-workspace"
    with second_user() as user:
        chown_tree(beta, user)
        shutil.rmtree(beta / ".memstrata")  # the daemon must issue a token, and would hand it to the user
        monkeypatch.setattr(helpers, "MEMSTRATA", WITHOUT_CHOWN)

        d = daemons(config)

        token = beta / ".memstrata" / "token"
        assert token.is_file() and token.stat().st_mode & 0o777 == 0o600
        assert token.stat().st_uid == 0, "chown was refused, so the token stays root's"
        assert (beta / ".memstrata").stat().st_mode & 0o777 == 0o700
        note = subprocess.run(
            [*WITHOUT_CHOWN, "--config", str(config), "note", "--agent", "beta", "noted without CAP_CHOWN"],
            capture_output=True,
            text=True,
        )
        assert note.returncode == 0, note.stderr
        (beta / "MEMORY.md").write_text("# MEMORY\n\n- committed without CAP_CHOWN\n")
        wait_for(
            lambda: (
                "without CAP_CHOWN"
                in subprocess.run(
                    ["git", f"--git-dir={beta}/.git", "show", "HEAD:MEMORY.md"], capture_output=True, text=True
                ).stdout
            ),
            what="commit in the foreign-owned workspace",
        )
        assert d.proc.poll() is None
        assert d.log().count("cannot change file ownership") == 1, "logged once"
        assert d.stop() == 0
