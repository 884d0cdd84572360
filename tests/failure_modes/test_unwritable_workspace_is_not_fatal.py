"""A workspace the daemon may not write (EACCES) costs that agent its token, never the daemon.

Found by booting the unit (tests/system): with ``CapabilityBoundingSet=`` empty, root
loses CAP_DAC_OVERRIDE, and the first workspace owned by its agent's own Unix user made
the daemon exit at start ("[Errno 13] Permission denied: '.memstrata'"), which systemd
restarted forever.  Here the daemon runs as root without the capabilities that bypass
file permissions and CAP_CHOWN, as that unit had (``setpriv --bounding-set=-dac_override,...``):
a real EACCES.
"""

from __future__ import annotations

import os
import sys

from tests import helpers
from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, init_root, run_cli, wait_for

DROPPED = "-dac_override,-dac_read_search,-fowner,-chown"
WITHOUT_DAC = ["setpriv", f"--bounding-set={DROPPED}", sys.executable, "-m", "daemon"]


def test_daemon_that_may_not_write_a_workspace_keeps_running_and_retries(tmp_path, daemons, monkeypatch):
    config = init_root(tmp_path, **LEAN)
    run_cli("agent", "add", "beta", config=config)
    beta = tmp_path / "workspace" / "agents" / "beta-workspace"
    with second_user() as user:
        chown_tree(beta, user)
        (beta / ".memstrata" / "token").unlink()
        os.rmdir(beta / ".memstrata")
        beta.chmod(0o755)  # its owner's: root without CAP_DAC_OVERRIDE may read, not write
        monkeypatch.setattr(helpers, "MEMSTRATA", WITHOUT_DAC)

        d = daemons(config)

        problem = wait_for(
            lambda: next((p for p in d.status()["storage"]["problems"] if p["place"] == "tokens"), None),
            what="the token problem in status",
        )
        assert problem["agent"] == "beta" and "Permission denied" in problem["error"], problem
        assert not (beta / ".memstrata").exists()
        (tmp_path / "workspace" / "MEMORY.md").write_text("# MEMORY\n\n- main still commits\n")
        wait_for(
            lambda: "main still commits" in helpers.git(tmp_path / "workspace", "show", "HEAD:MEMORY.md"),
            what="a commit in the main workspace",
        )
        assert d.proc.poll() is None

        beta.chmod(0o777)  # the operator fixes it: the retry issues the token without a restart
        token = beta / ".memstrata" / "token"
        wait_for(token.is_file, timeout=30, what="the token after the retry")
        assert d.proc.poll() is None
        assert d.stop() == 0
