"""Every agent the real OpenClaw makes is found (issue 49, items 1 and 2), with real daemons.

OpenClaw 2026.9 writes its roster as ``agents.entries.<id>`` (fixtures/openclaw-2026.9.6.json5 is
its own file, captured after ``openclaw onboard`` and two ``openclaw agents add``): ``research``,
added without a workspace, lives at ``<agents.defaults.workspace>/research``, inside main's
workspace. Before: only ``agents.list[]`` was read (research never found: no token, no index, no
commit), a stray ``workspace-<name>`` folder was adopted, ``~`` was the file owner's home, an
agent added while the daemon ran waited for the periodic reconcile (5 minutes), ``init`` on
OpenClaw's state dir put ``admin.token`` in OpenClaw's own ``state/`` beside its databases, and
``.memstrata/token`` sat untracked in each repository OpenClaw tells users to push.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import json5
import yaml

from tests.helpers import LEAN, commits, git, init_root, run_cli, wait_for

FIXTURE = Path(__file__).parent / "fixtures" / "openclaw-2026.9.6.json5"


def _roster(state: Path) -> dict:
    """OpenClaw's own openclaw.json for state dir ``state``, as data."""
    return json5.loads(FIXTURE.read_text() % {"state": state})


def _write(state: Path, data: dict | str) -> str:
    """openclaw.json written as OpenClaw writes it: a new file renamed over the old one."""
    text = data if isinstance(data, str) else json.dumps(data, indent=2)
    tmp = state / f"openclaw.json.{os.getpid()}.tmp"
    tmp.write_text(text)
    os.rename(tmp, state / "openclaw.json")
    return text


def _onboarded(state: Path) -> Path:
    """A state dir as ``openclaw onboard`` leaves it: main's workspace (not empty), its databases."""
    (state / "workspace").mkdir(parents=True)
    (state / "workspace" / "AGENTS.md").write_text("# AGENTS\n")
    (state / "state").mkdir()
    (state / "state" / "openclaw.sqlite").write_bytes(b"SQLite format 3\x00 OpenClaw's own")
    return state


def _workspace(path: Path, words: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "MEMORY.md").write_text(f"# MEMORY\n\n- {words}\n")
    return path


def _search(config: Path, agent: str, query: str) -> list[str]:
    found = json.loads(run_cli("search", query, "--agent", agent, "--json", config=config).stdout)
    return [r["path"] for r in found["results"]]


def _audited(workspace: Path, event: str) -> list[dict]:
    logs = sorted((workspace / "logs" / "security").glob("*.log"))
    return [e for f in logs for line in f.read_text().splitlines() if (e := json.loads(line))["event"] == event]


def _with_lean(config: Path, **watch: float) -> Path:
    data = yaml.safe_load(config.read_text())
    for section, values in LEAN.items():
        data.setdefault(section, {}).update(values)
    data["watch"].update(watch)
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def test_the_roster_openclaw_writes_is_found_and_a_nested_workspace_is_its_own(tmp_path, daemons):
    state = _onboarded(tmp_path / "oc")
    text = _write(state, _roster(state))
    research = _workspace(state / "workspace" / "research", "research's quokka census")
    work = _workspace(state / "workspace-work", "work's own notes")
    stray = state / "workspace-stray"  # a folder no roster lists
    stray.mkdir()

    run_cli("init", "--root", str(state))
    config = _with_lean(state / "memstrata.yaml")
    own = state / "memstrata" / "state"
    assert (own / "admin.token").is_file() and (own / "tokens.json").is_file(), "memstrata's state: its own folder"
    assert sorted(os.listdir(state / "state")) == ["openclaw.sqlite"], "OpenClaw's state/ is OpenClaw's alone"
    assert not (state / "run").exists()

    d = daemons(config)
    wait_for(lambda: commits(research) and commits(work), what="research's and work's workspaces committed")
    assert {a["id"] for a in d.status()["agents"]} == {"main", "research", "work"}
    for workspace in (research, work):
        assert (workspace / ".memstrata" / "token").is_file()
        assert "/.memstrata/" in (workspace / ".git" / "info" / "exclude").read_text().splitlines()
        assert ".memstrata" not in git(workspace, "status", "--porcelain", "--ignored=no"), "the token is excluded"
        assert not (workspace / ".gitignore").exists(), "the user's .gitignore is never written"
    assert not os.listdir(stray), "a workspace-<name> no roster lists is nobody's: nothing written there"

    (research / "memory").mkdir()
    (research / "memory" / "2026-12-01.md").write_text("# 2026-12-01\n\n- counted quokkas on the island\n")
    wait_for(lambda: "memory/2026-12-01.md" in git(research, "ls-files"), what="research's edit committed")
    main = state / "workspace"
    assert not [p for p in git(main, "ls-files").splitlines() if p.startswith("research/")], "main commits none of it"
    assert "/research/" in (main / ".git" / "info" / "exclude").read_text().splitlines()
    assert "research/" not in git(main, "status", "--porcelain"), "research's repository is not main's to list"
    assert _search(config, "research", "quokka"), "research's index holds its own notes"
    assert _search(config, "main", "quokka") == [], "main's index holds none of research's"
    assert (state / "openclaw.json").read_text() == text, "OpenClaw's file is never written"
    assert d.stop() == 0


def test_an_agent_openclaw_adds_while_the_daemon_runs_is_found_within_seconds(tmp_path, daemons):
    """The periodic reconcile is an hour away: found at all, the agent was found by the watch."""
    state = tmp_path
    config = init_root(state, **{**LEAN, "watch": {**LEAN["watch"], "reconcile_interval_s": 3600}})
    roster = _roster(state)
    later = {k: roster["agents"]["entries"].pop(k) for k in ("research", "work")}
    _write(state, roster)
    d = daemons(config)
    assert {a["id"] for a in d.status()["agents"]} == {"main"}

    work = _workspace(state / "workspace-work", "work's notes")  # the workspace first, then the roster
    roster["agents"]["entries"]["work"] = later["work"]
    _write(state, roster)
    research = state / "workspace" / "research"  # the roster first, then the workspace (nested in main's)
    roster["agents"]["entries"]["research"] = later["research"]
    _write(state, roster)
    _workspace(research, "research's notes")

    for workspace in (work, research):
        wait_for(
            lambda w=workspace: (w / ".memstrata" / "token").is_file() and commits(w),
            timeout=20,
            what=f"{workspace.name}: a token and a commit soon after `openclaw agents add`",
        )
    assert {a["id"] for a in d.status()["agents"]} == {"main", "research", "work"}
    wait_for(lambda: str(work) in d.status()["watcher"]["roots"], what="work's workspace watched")
    (work / "memory").mkdir()
    (work / "memory" / "2026-12-02.md").write_text("# 2026-12-02\n\n- shipped\n")
    wait_for(lambda: "memory/2026-12-02.md" in git(work, "ls-files"), what="an edit in work committed (watched)")
    assert d.stop() == 0


def test_hostile_entries_in_the_roster_cost_only_themselves(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    main = tmp_path / "workspace"
    research = _workspace(main / "research", "research's private plan")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "link").symlink_to(main)  # a symlinked parent reaching research's workspace
    (tmp_path / "linked").symlink_to(outside)
    for name in ("one", "two", "list-only"):
        (tmp_path / name).mkdir()
    (research / "deeper").mkdir()
    roster = {
        "agents": {
            "defaults": {"workspace": str(main)},
            "entries": {
                "main": {"workspace": str(main)},
                "research": {"name": "research"},  # <agents.defaults.workspace>/research
                "evil": {"workspace": str(tmp_path / "link" / "research")},
                "linked": {"workspace": str(tmp_path / "linked")},
                "rooty": {"workspace": "~root/.ssh"},
                "notobj": "a string, not an entry",
                "memory": {},  # <main>/memory: main's own memory folder
                "deep": {"workspace": str(research / "deeper")},
                "conflict": {"workspace": str(tmp_path / "one")},
            },
            "list": [
                {"id": "conflict", "workspace": str(tmp_path / "two")},
                {"id": "listonly", "workspace": str(tmp_path / "list-only")},
            ],
        }
    }
    text = _write(tmp_path, roster)
    token_file = research / ".memstrata" / "token"

    d = daemons(config)
    wait_for(lambda: commits(research), what="research's workspace committed")
    before = token_file.read_bytes()
    assert {a["id"] for a in d.status()["agents"]} == {"main", "research"}
    refused = {r["agent"]: r["reason"] for r in d.status()["daemon"]["workspaces_refused"]}
    assert refused["evil"].startswith("is agent research's workspace")
    assert refused["linked"].startswith("is a symbolic link")
    assert refused["memory"].startswith("lies inside agent main's workspace")
    assert refused["deep"].startswith("lies inside agent research's workspace")
    assert refused["conflict"].startswith("agents.entries gives it")
    assert set(refused) == {"evil", "linked", "memory", "deep", "conflict"}
    audited = {e["agent"] for e in _audited(main, "workspace_refused")}
    assert set(refused) <= audited
    log = d.log()
    assert "rooty: workspace '~root/.ssh' is not an absolute path; skipped" in log
    assert "agents.entries.notobj is not an object; skipped" in log
    assert "listonly is in agents.list but not in agents.entries" in log
    for name in ("one", "two", "list-only", "outside"):
        assert not os.listdir(tmp_path / name), f"nothing written in {name}"
    assert sorted(os.listdir(research / "deeper")) == []
    assert token_file.read_bytes() == before, "research's token is its own"
    assert (tmp_path / "openclaw.json").read_text() == text
    status = run_cli("status", config=config, check=False).stdout
    assert "conflict" in status and "REFUSED" in status
    assert d.stop() == 0


def test_a_huge_roster_is_read_up_to_its_limit(tmp_path):
    config = init_root(tmp_path, **LEAN)
    _workspace(tmp_path / "workspace" / "a00001", "the first")
    _workspace(tmp_path / "workspace" / "a10001", "past the limit: not read")
    entries = {f"a{i:05d}": {} for i in range(1, 12_001)}
    _write(tmp_path, {"agents": {"defaults": {"workspace": str(tmp_path / "workspace")}, "entries": entries}})
    listed = run_cli("agent", "list", "--json", config=config)
    assert [a["id"] for a in json.loads(listed.stdout)] == ["main", "a00001"], "the first 10,000 only"


def test_tilde_is_the_home_of_the_user_openclaw_runs_as(tmp_path):
    """The daemon runs as root; OpenClaw's gateway as the user owning its state dir: ``~`` is theirs."""
    config = init_root(tmp_path, **LEAN)
    home = tmp_path / "home-oc"
    _workspace(home / "ws-tilde", "tilde's notes")
    name = f"oc{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin", name])
    try:
        os.chown(tmp_path, int(subprocess.check_output(["id", "-u", name])), -1)  # OpenClaw's state dir is theirs
        _write(tmp_path, {"agents": {"entries": {"tilde": {"workspace": "~/ws-tilde"}}}})
        listed = {a["id"]: a["workspace"] for a in json.loads(run_cli("agent", "list", "--json", config=config).stdout)}
        assert listed["tilde"] == str(home / "ws-tilde"), "not the daemon's nor the file owner's home (/root)"
    finally:
        os.chown(tmp_path, 0, -1)
        subprocess.run(["userdel", name], check=False)
