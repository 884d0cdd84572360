"""One typo in ``memstrata.yaml``, then SIGHUP: the daemon runs on, and so must the operator's commands.

Before: the daemon refused the file and kept its last good configuration (as documented), but
``memstrata status``, ``search``, ``note`` and the skill's ``local_search.py`` all failed on the
broken file, so the README's "status shows why the reload failed" could not be seen.  Now the front
falls back to the paths of the file's last good version, the running daemon's (the validated-
configuration cache keeps them: daemon/common/config_cache.py ``last_good``), answers, and says on
stderr that the file on disk is broken, naming file and line.  Without a last good version the
error is what it was.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from daemon.front.daemon_client import DaemonClient
from tests.helpers import LEAN, REPO_ROOT, init_root, run_cli, wait_for

pytestmark = pytest.mark.slow


def misspell(config) -> None:
    """One typo: ``debounce_ms`` spelled ``debounse_ms`` (an unknown key, named with its line)."""
    text = config.read_text()
    assert "debounce_ms:" in text
    config.write_text(text.replace("debounce_ms:", "debounse_ms:", 1))


LOCAL_SEARCH = REPO_ROOT / "skills" / "mem0-integration" / "local_search.py"


def _broken_file_said(stderr: str, config) -> None:
    assert "Traceback" not in stderr, stderr
    assert str(config) in stderr and "debounse_ms" in stderr and re.search(r"line \d+", stderr), stderr
    assert "last good" in stderr, stderr


def test_a_typo_after_sighup_leaves_status_search_note_and_local_search_working(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    (tmp_path / "workspace" / "memory" / "2026-11-30.md").write_text("the wombat ledger lives in room 4\n")
    daemon = daemons(config)
    wait_for(lambda: "wombat" in run_cli("search", "wombat", "--agent", "main", config=config).stdout)

    misspell(config)
    daemon.signal(signal.SIGHUP)
    token = (tmp_path / "state" / "admin.token").read_text().strip()

    def refused() -> str:
        with DaemonClient(daemon.socket, timeout=10, token=token) as client:
            return client.status()["daemon"].get("config_error") or ""

    wait_for(refused, timeout=30, what=f"the reload refused\n{daemon.log()}")

    status = run_cli("status", config=config, check=False)
    assert status.returncode == 0, (status.stdout, status.stderr)
    assert "daemon running" in status.stdout and "reload refused" in status.stdout, status.stdout
    _broken_file_said(status.stderr, config)
    as_json = run_cli("status", "--json", config=config, check=False)
    assert as_json.returncode == 0 and "debounse_ms" in json.loads(as_json.stdout)["daemon"]["config_error"]

    found = run_cli("search", "wombat", "--agent", "main", config=config, check=False)
    assert found.returncode == 0 and "memory/2026-11-30.md" in found.stdout, (found.stdout, found.stderr)
    _broken_file_said(found.stderr, config)

    noted = run_cli("note", "--agent", "main", "the numbat ledger moved to room 5", config=config, check=False)
    assert noted.returncode == 0, noted.stderr
    assert "numbat ledger" in (tmp_path / "workspace" / noted.stdout.strip()).read_text()
    _broken_file_said(noted.stderr, config)

    skill = subprocess.run(
        [sys.executable, str(LOCAL_SEARCH), "wombat", "--agent", "main", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "MEMSTRATA_CONFIG"},
    )
    assert skill.returncode == 0 and "memory/2026-11-30.md" in skill.stdout, (skill.stdout, skill.stderr)
    _broken_file_said(skill.stderr, config)


def test_without_a_last_good_version_the_error_is_the_files(tmp_path):
    config = init_root(tmp_path, **LEAN)
    misspell(config)  # never validated by a front call before
    status = run_cli("status", config=config, check=False)
    assert status.returncode == 1 and "Traceback" not in status.stderr
    assert str(config) in status.stderr and "debounse_ms" in status.stderr and "last good" not in status.stderr
