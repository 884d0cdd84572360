"""git.remote through the running daemon: commits pushed to a bare remote (a plain path), the backlog while it
is away and after a restart, a rewritten remote ref refused and left alone, an agent restored on a new host.

Real daemon subprocesses, real git; every wait has a deadline and nothing asserts how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from daemon.front.daemon_client import _UnixConnection
from tests.helpers import LEAN, bare_remote, git, init_root, ref_of, run_cli, wait_for

HOST = "spoke-1"


def _root(tmp_path: Path, remote: Path, host: str = HOST, name: str = "host") -> Path:
    remote_git = {**LEAN["git"], "remote": str(remote), "push_retry_max_s": 2}
    return init_root(tmp_path / name, **{**LEAN, "git": remote_git, "fleet": {"host": host}})


def _sync(d, agent: str = "main") -> dict:
    sync = d.status()["sync"]
    return {**sync, "agent": next((a for a in sync["agents"] if a["id"] == agent), None)}


def _line0(agent: str = "main", host: str = HOST) -> str:
    return f"refs/memstrata/{host}/{agent}/line/0"


def _note(ws: Path, name: str, text: str) -> str:
    (ws / "memory" / name).write_text(text)
    wait_for(lambda: name in git(ws, "log", "-1", "--format=%s"), what=f"the commit of {name}")
    return git(ws, "rev-parse", "HEAD").strip()


def test_a_note_reaches_the_remote_and_status_and_the_host_report_say_so(tmp_path, daemons):
    remote = bare_remote(tmp_path / "fleet.git")
    config = _root(tmp_path, remote)
    ws = config.parent / "workspace"
    d = daemons(config)
    head = _note(ws, "2026-12-01.md", "# day\n\n- pushed to the hub\n")
    wait_for(lambda: ref_of(remote, _line0()) == head, what="the commit on the remote's line/0")
    s = wait_for(lambda: (s := _sync(d))["agent"]["last_pushed"] == head and s, what="status names the pushed commit")
    assert s["host"] == HOST and s["remote"] == str(remote) and s["reachable"] is True
    assert s["agent"]["behind_commits"] == 0 and s["agent"]["refused"] == [] and s["agent"]["pushed_at"]

    def report() -> dict:
        doc = json.loads(git(remote, "show", f"refs/memstrata/{HOST}/status:status.json"))
        return doc if (doc["agents"].get("main") or {}).get("last_pushed") == head else {}

    doc = wait_for(report, what="the host's report names the pushed commit")
    assert doc["host"] == HOST and doc["version"] and doc["time"] and doc["agents"]["main"]["behind_commits"] == 0
    assert git(remote, "rev-list", "--count", f"refs/memstrata/{HOST}/status").strip() != "1", "a line of reports"
    text = " ".join(run_cli("status", config=config).stdout.split())  # the report's lines fit the terminal
    assert f"sync: host {HOST} to {remote}: reachable, up to date" in text
    conn = _UnixConnection(str(d.socket), timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {d.admin_token()}"})
    series = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(conn.getresponse().read().decode())
        for s in family.samples
    }
    assert series[("memstrata_sync_reachable", ())] == 1
    assert series[("memstrata_sync_behind_commits", (("agent", "main"),))] == 0
    assert series[("memstrata_sync_refused_refs", (("agent", "main"),))] == 0
    anonymous = d.status(token=None)["sync"]
    assert (
        anonymous["host"] == HOST and anonymous["reachable"] and "remote" not in anonymous and "agents" not in anonymous
    )


def test_an_absent_remote_keeps_a_backlog_that_drains_when_it_is_back_and_after_a_restart(tmp_path, daemons):
    remote = tmp_path / "fleet.git"  # not there yet
    config = _root(tmp_path, remote)
    ws = config.parent / "workspace"
    d = daemons(config)
    _note(ws, "2026-12-01.md", "one\n")
    head = _note(ws, "2026-12-02.md", "two\n")
    s = wait_for(lambda: (s := _sync(d))["reachable"] is False and s["agent"]["behind_commits"] >= 2 and s)
    assert s["last_error"] and s["failing_since"]
    assert "UNREACHABLE" in run_cli("status", config=config).stdout
    bare_remote(remote)
    wait_for(lambda: ref_of(remote, _line0()) == head, timeout=30, what="the backlog drained once the remote is back")
    wait_for(lambda: (s := _sync(d))["reachable"] and s["agent"]["behind_commits"] == 0, what="status: caught up")

    # a backlog left by a stopped daemon is pushed at the next start
    d.stop()
    (tmp_path / "away.git").mkdir()
    remote.rename(tmp_path / "away.git" / "fleet.git")
    d = daemons(config)
    later = _note(ws, "2026-12-03.md", "three\n")
    wait_for(lambda: _sync(d)["agent"]["behind_commits"] >= 1, what="status says behind")
    d.stop()
    (tmp_path / "away.git" / "fleet.git").rename(remote)
    d = daemons(config)
    wait_for(lambda: ref_of(remote, _line0()) == later, what="the backlog pushed at start")
    assert git(remote, "rev-list", "--count", _line0()).strip() == git(ws, "rev-list", "--count", "HEAD").strip()


def test_a_remote_ref_rewritten_by_someone_else_is_refused_said_and_left_alone(tmp_path, daemons):
    remote = bare_remote(tmp_path / "fleet.git")
    config = _root(tmp_path, remote)
    ws = config.parent / "workspace"
    d = daemons(config)
    head = _note(ws, "2026-12-01.md", "one\n")
    wait_for(lambda: ref_of(remote, _line0()) == head)
    tree = git(remote, "rev-parse", f"{head}^{{tree}}").strip()
    theirs = subprocess.run(
        ["git", "-C", str(remote), "commit-tree", tree, "-m", "someone rewrote it"],
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "x",
            "GIT_AUTHOR_EMAIL": "x@y",
            "GIT_COMMITTER_NAME": "x",
            "GIT_COMMITTER_EMAIL": "x@y",
        },
    ).stdout.strip()
    git(remote, "update-ref", _line0(), theirs)
    mine = _note(ws, "2026-12-02.md", "two\n")
    s = wait_for(lambda: (s := _sync(d))["agent"]["refused"] and s, what="the refusal in status")
    (refused,) = s["agent"]["refused"]
    assert refused["remote_ref"] == _line0() and refused["sha"] == mine and refused["reason"]
    assert s["agent"]["behind_commits"] >= 1 and ref_of(remote, _line0()) == theirs, "the remote is left as it was"
    assert "REFUSED" in run_cli("status", config=config).stdout
    audit = config.parent / "workspace" / "logs" / "security"
    events = [
        json.loads(line) for f in audit.glob("*") for line in f.read_text().splitlines() if "sync_refused" in line
    ]
    assert events and events[0]["agent"] == "main" and events[0]["remote_ref"] == _line0()
    assert "refused" in d.log() and "never forced" in d.log()


def test_a_remote_ref_moved_back_is_pushed_forward_again_and_said(tmp_path, daemons):
    remote = bare_remote(tmp_path / "fleet.git")
    config = _root(tmp_path, remote)
    ws = config.parent / "workspace"
    d = daemons(config)
    first = _note(ws, "2026-12-01.md", "one\n")
    wait_for(lambda: ref_of(remote, _line0()) == first)
    second = _note(ws, "2026-12-02.md", "two\n")
    wait_for(lambda: ref_of(remote, _line0()) == second)
    git(remote, "update-ref", _line0(), first)  # the hub's root, or an older backup of the remote put back
    third = _note(ws, "2026-12-03.md", "three\n")
    s = wait_for(lambda: (s := _sync(d))["agent"]["rewound"] and s, what="the rewind in status")
    (rewound,) = s["agent"]["rewound"]
    assert (rewound["remote_ref"], rewound["acknowledged"], rewound["sha"]) == (_line0(), second, third)
    assert first.startswith(rewound["found"]) and rewound["found"]
    assert ref_of(remote, _line0()) == third and not s["agent"]["refused"], "fast-forward: the lost commit is back"
    assert "REWOUND" in run_cli("status", config=config).stdout
    audit = config.parent / "workspace" / "logs" / "security"
    events = [
        json.loads(line) for f in audit.glob("*") for line in f.read_text().splitlines() if "sync_rewound" in line
    ]
    assert [(e["agent"], e["acknowledged"], e["sha"]) for e in events] == [("main", second, third)]
    assert "behind the" in d.log()


def test_an_agent_restored_on_a_new_host_has_every_file_and_commit_and_is_searchable(tmp_path, daemons):
    remote = bare_remote(tmp_path / "fleet.git")
    old = _root(tmp_path, remote, name="old")
    run_cli("agent", "add", "alpha", config=old)
    ws = old.parent / "workspace" / "agents" / "alpha-workspace"
    d = daemons(old)
    _note(ws, "2026-12-01.md", "# day\n\n- the hub listens on 6333\n")
    head = _note(ws, "2026-12-02.md", "# day\n\n- zebrafish deployment finished\n")
    wait_for(lambda: ref_of(remote, _line0("alpha")) == head, what="alpha on the remote")
    d.stop()

    new = _root(tmp_path, remote, host="spoke-2", name="new")
    missing = run_cli("agent", "restore-from-remote", "nobody", "--host", HOST, "--json", config=new, check=False)
    assert missing.returncode == 1 and "nothing on the remote" in missing.stderr
    assert json.loads(missing.stdout)["error"]["code"] == "not_on_remote"
    done = json.loads(run_cli("agent", "restore-from-remote", "alpha", "--host", HOST, "--json", config=new).stdout)
    assert done["commit"] == head and done["host"] == HOST
    ws2 = new.parent / "workspace" / "agents" / "alpha-workspace"
    assert git(ws2, "rev-list", "HEAD") == git(ws, "rev-list", "HEAD")
    assert git(ws2, "ls-files", "-s") == git(ws, "ls-files", "-s")
    # every committed file as it was; what was never committed (the skill agent add installs) is not history
    assert set(git(ws2, "status", "--porcelain").splitlines()) <= set(git(ws, "status", "--porcelain").splitlines())
    for path in (ws / "memory").iterdir():
        assert (ws2 / "memory" / path.name).read_bytes() == path.read_bytes()
    again = run_cli("agent", "restore-from-remote", "alpha", "--host", HOST, config=new, check=False)
    assert again.returncode != 0 and "exists here" in again.stderr
    gone = run_cli(
        "agent", "restore-from-remote", "beta", config=_root(tmp_path, tmp_path / "no.git", name="x"), check=False
    )
    assert gone.returncode != 0 and "cannot be reached" in gone.stderr

    d2 = daemons(new)
    found = wait_for(
        lambda: json.loads(run_cli("search", "zebrafish", "--agent", "alpha", "--json", config=new).stdout)["results"],
        what="the restored notes searchable",
    )
    assert found[0]["path"] == "memory/2026-12-02.md"
    # the new host pushes the agent under its own name, from where the old one left off
    wait_for(lambda: ref_of(remote, _line0("alpha", "spoke-2")) is not None, what="alpha under spoke-2")
    assert ref_of(remote, _line0("alpha")) == head and d2.status()["sync"]["host"] == "spoke-2"


def test_a_history_the_agent_rewrote_goes_to_a_new_line_and_the_old_one_stays(tmp_path, daemons):
    remote = bare_remote(tmp_path / "fleet.git")
    config = _root(tmp_path, remote)
    ws = config.parent / "workspace"
    d = daemons(config)
    _note(ws, "2026-12-01.md", "one\n")
    old = _note(ws, "2026-12-02.md", "two\n")
    wait_for(lambda: ref_of(remote, _line0()) == old)
    git(ws, "reset", "-q", "--hard", "HEAD~1")  # the agent rewrites its own history
    new = _note(ws, "2026-12-03.md", "three\n")
    line1 = f"refs/memstrata/{HOST}/main/line/1"
    wait_for(lambda: ref_of(remote, line1) == new, what="the rewritten history on a line of its own")
    lost = git(remote, "for-each-ref", "--format=%(objectname)", f"refs/memstrata/{HOST}/main/lost/").split()
    assert ref_of(remote, _line0()) == old and lost == [old], "the old line stays as it was, and as lost"
    s = wait_for(lambda: (s := _sync(d))["agent"]["last_pushed"] == new and s)
    assert s["agent"]["remote_ref"] == line1 and s["agent"]["refused"] == [] and s["agent"]["behind_lost"] == 0
