"""``memstrata status`` is never stale: what changed shows on the very next status call.

Before: the published document was rebuilt only when a file changed, so after the
daemon logged that it loaded the model, status kept saying "not loaded … embedded 0"
for over a minute, and after a ``memstrata restore`` (a commit the CLI made, not the
daemon) status showed the previous last commit until a restart.  Real daemon, real
model, the real CLI.
"""

from __future__ import annotations

import json

from daemon.front.status import render
from tests.helpers import FAST, commits, init_root, run_cli, wait_for


def _status(config) -> dict:
    return json.loads(run_cli("status", "--json", config=config).stdout)


def test_a_model_load_shows_on_the_next_status_call(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"idle_unload_s": 600})
    d = daemons(config)
    (tmp_path / "workspace" / "memory" / "2026-11-20.md").write_text("# 部署\n\nQdrant 部署在 6333 端口\n")
    wait_for(lambda: "MB were free)" in d.log(), timeout=180, interval=0.02, what="the daemon logs the model load")
    vectors = _status(config)["vectors"]  # the first call after the log line, nothing in between
    assert vectors["loads"] >= 1 and vectors["loaded"] is True


def test_a_restore_by_the_cli_shows_on_the_next_status_call(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    d = daemons(config)
    ws = tmp_path / "workspace"
    first = commits(ws)[-1]["sha"]
    with (ws / "MEMORY.md").open("a", encoding="utf-8") as f:
        f.write("\n- a line to take back\n")
    wait_for(lambda: len(commits(ws)) >= 2 and not d.agent("main")["pending_commit"], what="the edit committed")
    restored = json.loads(
        run_cli("restore", "--agent", "main", "MEMORY.md", "--at", first, "--json", config=config).stdout
    )
    assert restored["commit"], "the restore made a commit"
    agent = _status(config)["agents"][0]
    assert restored["commit"].startswith(agent["last_commit"]["sha"])
    assert agent["last_commit"]["subject"] == commits(ws)[0]["subject"]


def test_a_document_the_loop_was_too_busy_to_rebuild_says_how_old_it_is(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    daemons(config)
    status = _status(config)
    assert status["daemon"]["age_s"] < 2 and status["daemon"]["as_of"], "built for this call"
    assert "the daemon is busy" not in render(status)
    status["daemon"]["age_s"] = 95.0
    assert "as of" in render(status) and "1m 35s ago" in render(status)
