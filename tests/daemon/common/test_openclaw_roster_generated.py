"""Generated hostile rosters (``agents.entries`` and ``agents.list``) against the survey of workspaces.

Hypothesis writes ``openclaw.json`` with ids from a small pool (valid, invalid, ``main``, one of
main's own folder names) whose entries are objects with and without a ``workspace``, strings,
lists or null, and whose workspaces are another agent's (however spelled: a symlinked parent),
a symlink, main's workspace or its memory folder, nested in a nested workspace, ``~``,
``~root``, relative, not a string, the state directory. Whatever it writes, the agents found
(daemon/common/workspaces.py ``survey``) are main and ids of ``agents.entries`` objects only, no
two share a directory, none lies inside another except a direct child of main's workspace that
is none of main's own folders, and an id whose two roster forms disagree is never an agent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.common.config import Config, load_config
from daemon.common.workspaces import MAIN_OWN_DIRS, survey
from tests.helpers import init_root

IDS = ["research", "alpha", "beta", "memory", "main", "Bad/Id", "x" * 70, "skills"]


class Host:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.config: Config = load_config(init_root(base))
        self.main = base / "workspace"
        for d in ("workspace/research/deeper", "workspace/alpha", "workspace/memory", "workspace/.hidden"):
            (base / d).mkdir(parents=True, exist_ok=True)
        for d in ("free/a/b", "outside"):
            (base / d).mkdir(parents=True, exist_ok=True)
        (base / "link").symlink_to(self.main)
        (base / "linked").symlink_to(base / "outside")
        self.workspaces: list[object] = [
            str(self.main / "research"),
            str(base / "link" / "research"),
            str(self.main / "research" / "deeper"),
            str(self.main / "memory"),
            str(self.main / ".hidden"),
            str(self.main),
            str(base / "linked"),
            str(base / "free" / "a"),
            str(base / "free" / "a" / "b"),
            str(self.config.paths.state_dir),
            "~root/.ssh",
            "~/",
            "relative/dir",
            "",
            42,
        ]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    return Host(tmp_path_factory.mktemp("roster"))


def _entry(host: Host) -> st.SearchStrategy[object]:
    with_workspace = st.sampled_from(host.workspaces).map(lambda w: {"workspace": w})
    return st.one_of(with_workspace, st.just({}), st.just("a string"), st.just([1]), st.none())


@st.composite
def rosters(draw: st.DrawFn, host: Host) -> dict:
    agents: dict[str, object] = {}
    if draw(st.booleans()):
        agents["defaults"] = {"workspace": draw(st.sampled_from([str(host.main), str(host.base / "free"), "~root"]))}
    if draw(st.booleans()):
        agents["entries"] = draw(st.dictionaries(st.sampled_from(IDS), _entry(host), max_size=6))
    if draw(st.booleans()):
        ids = st.sampled_from(IDS)
        agents["list"] = draw(st.lists(st.one_of(_entry(host), ids.map(lambda i: {"id": i})), max_size=4))
        for item in agents["list"]:  # type: ignore[union-attr]
            if isinstance(item, dict) and "id" not in item:
                item["id"] = draw(ids)
    return {"agents": agents}


def _inside(inner: Path, outer: Path) -> bool:
    return inner != outer and outer in inner.parents


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_a_generated_roster_never_gives_an_agent_anothers_directory(host, data):
    roster = data.draw(rosters(host))
    tmp = host.base / "openclaw.json.tmp"
    tmp.write_text(json.dumps(roster))
    os.rename(tmp, host.base / "openclaw.json")  # a new inode: the survey reads it again

    found = survey(host.config)
    entries = roster["agents"].get("entries")
    ids = {a.id for a in found.agents}
    assert "main" in ids
    for agent in found.agents:
        if agent.id == "main":
            continue
        if entries is not None:
            assert isinstance(entries.get(agent.id), dict), f"{agent.id}: only an object of agents.entries is an agent"
        else:
            assert any(isinstance(i, dict) and i.get("id") == agent.id for i in roster["agents"].get("list", []))
    reals = {a.id: Path(os.path.realpath(a.workspace)) for a in found.agents}
    assert len(set(reals.values())) == len(reals), f"two agents share a directory: {reals}"
    main = reals["main"]
    for agent_id, real in reals.items():
        for other, theirs in reals.items():
            if other == agent_id or not _inside(real, theirs):
                continue
            nested = other == "main" and real.parent == main and real.name not in MAIN_OWN_DIRS
            assert nested and not real.name.startswith("."), f"{agent_id} at {real} lies inside {other}'s {theirs}"
    for real in reals.values():
        assert not _inside(real, host.config.paths.state_dir) and real != host.config.paths.state_dir
    listed: dict[str, object] = {}
    for item in roster["agents"].get("list", []):  # an id listed twice: its first entry, as OpenClaw's lookup
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            listed.setdefault(item["id"], item.get("workspace"))
    for refusal in found.refused:
        assert refusal.agent_id not in ids
    for agent_id in (ids & set(listed)) - {"main"}:  # main's workspace is the configured one, not the roster's
        entry = entries.get(agent_id) if isinstance(entries, dict) else None
        given = [entry.get("workspace") if isinstance(entry, dict) else None, listed[agent_id]]
        if all(isinstance(g, str) and g.strip() for g in given):
            a, b = (os.path.normpath(str(g)) for g in given)
            assert a == b, f"{agent_id}: the two roster forms disagree ({a}, {b}), yet it is an agent"
