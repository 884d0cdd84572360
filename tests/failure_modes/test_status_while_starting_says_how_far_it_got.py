"""``memstrata status`` while the daemon was still starting printed a ``KeyError: 'daemon'`` traceback.

Before: the API answers as soon as the daemon's start has begun, but the status
document is built only once every workspace has been checked; on a root of 21,000
files that took most of a minute, and each ``memstrata status`` meanwhile got an
empty document and crashed on it (text and ``--json``).  Now the daemon answers with
how far its start has got: ``starting: N of M files checked`` (then the index being
built), in the text and in ``daemon.starting`` of the JSON, to the administrator and
to anyone else alike; once the start is done, the usual report.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import LEAN, git, init_root, run_cli, wait_for

pytestmark = pytest.mark.slow

FILES = 10_000  # 21,000 took most of a minute; 10,000 keep the start long enough to be asked about
STARTING = re.compile(r"starting: ([\d,]+) of ([\d,]+) files checked")


def _many_files(config_root) -> None:
    """FILES notes in the main workspace, committed already (so the daemon has nothing to commit)."""
    memory = config_root / "workspace" / "memory"
    for i in range(FILES):
        (memory / f"note-{i:05d}.md").write_text(f"# note {i}\n\ntopic {i % 97}, word{i}\n", encoding="utf-8")
    workspace = config_root / "workspace"
    git(workspace, "add", "-A")
    git(workspace, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "notes")


def _figures(text: str) -> tuple[int, int]:
    found = STARTING.search(text)
    assert found, text
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def test_status_during_a_long_start_says_starting_n_of_m_files(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    _many_files(tmp_path)
    d = daemons(config, wait=False)
    wait_for(d.socket.exists, timeout=120, what=f"the daemon's socket\n{d.log()}")

    seen_text: list[tuple[int, int]] = []
    seen_json: list[dict] = []

    def started() -> bool:
        text = run_cli("status", config=config, check=False)
        assert "Traceback" not in text.stderr and text.returncode == 0, text.stderr
        as_json = run_cli("status", "--json", config=config, check=False)
        assert "Traceback" not in as_json.stderr and as_json.returncode == 0, as_json.stderr
        document = json.loads(as_json.stdout)
        if "starting" not in text.stdout.splitlines()[0]:
            return "starting" not in document["daemon"]  # the usual report: the start is done
        assert text.stdout.startswith("memstrata ") and "daemon starting (pid" in text.stdout, text.stdout
        seen_text.append(_figures(text.stdout))
        if "starting" in document["daemon"]:
            seen_json.append(document["daemon"])
        return False

    wait_for(started, timeout=600, interval=0.5, what=f"the start to end\n{d.log()}")
    assert seen_text and seen_json, "the start ended before status was asked: nothing was shown while starting"
    assert all(total >= FILES for _, total in seen_text), seen_text
    assert [done for done, _ in seen_text] == sorted(done for done, _ in seen_text), seen_text  # it moves forward
    starting = seen_json[-1]["starting"]
    assert starting["files"] >= FILES and 0 <= starting["checked"] <= starting["files"], starting
    assert STARTING.search(seen_json[-1]["summary"]) and seen_json[-1]["running"] is True, seen_json[-1]

    # Once started: the agents, as always.
    report = run_cli("status", config=config).stdout
    assert "main  " in report and "daemon running" in report and "starting:" not in report, report
    main = next(a for a in d.status()["agents"] if a["id"] == "main")
    assert main["files"] >= FILES


def test_status_while_starting_is_shown_without_a_token_too():
    """The starting document through the API's scoping: health for anyone includes the progress."""
    from daemon.api.app import scoped_status
    from daemon.files.starting import INDEXING, StartProgress
    from daemon.front.status import render

    progress = StartProgress({"main": 15_000, "beta": 6_000})
    progress.begin("main", "checking files")
    for _ in range(15_000):
        progress.file_checked()
    progress.begin("main", INDEXING)
    index = {"done": 4_000, "total": 15_000, "phase": "sync"}
    document = {
        "daemon": {
            "running": True,
            "pid": 42,
            "version": "0",
            "uptime_s": 12.0,
            "socket": "/run/memstrata.sock",
            "summary": progress.describe(index),
            "starting": progress.report(index),
        },
        "watcher": {"mode": "inotify", "reason": "", "roots": ["/srv"]},
        "reconcile": {"time": None},
        "limits": {"max_file_mb": 10, "debounce_ms": 500, "quiet_period_s": 30, "max_delay_s": 300},
        "conversation": {},
    }
    for caller in (None, "beta", "admin"):
        text = render(scoped_status(document, caller))
        assert "daemon starting (pid 42" in text, text
        assert "starting: 15,000 of 21,000 files checked; indexing main: 4,000 of 15,000 files" in text, text
        assert "shown once every workspace has been checked" in text and "no agents" not in text, text
