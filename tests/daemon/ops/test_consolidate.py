"""`memstrata consolidate` through the real daemon and with the daemon down: plan, apply, refuse, undo.

Real daemon, real Edge store, real e5 model; the LLM of the last test is tests/stand_in_llm.py
(a stand-in: no LLM runs here), configured as conversation.llm.
"""

from __future__ import annotations

import json
import stat

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from tests.edge_store import all_points
from tests.helpers import FAST, init_root, registry_of, run_cli, token_of, wait_reachable
from tests.stand_in_llm import StandInLLM

FILLER = [
    "The CI pipeline fails when the cache is cold",
    "用户喜欢简洁的回答",
    "Alice prefers tea over coffee",
    "备份任务每天凌晨四点运行",
    "the staging cluster has three nodes",
    "周报每周五下午发出",
    "The VPN config lives in the ops repository",
    "用户的时区是 UTC+8",
    "Grafana dashboards are exported weekly",
    "项目代号是 Lighthouse",
]
DUPLICATES = ["Qdrant 部署在 6333 端口", "Qdrant 部署在 6333 端口。", "记一下：Qdrant 部署在 6333 端口"]
DISTINCT = ["Qdrant 部署在 6334 端口", "会议改到周三下午三点", "会议改到周四下午三点"]


def add_all(daemon, agent: str, texts: list[str], **options) -> list[str]:
    with DaemonClient(daemon.socket, timeout=60, token=token_of(daemon.config.parent, agent)) as client:
        return [client.add(agent, text, **options)["results"][0]["id"] for text in texts]


def by_id(root) -> dict[str, dict]:
    return {p.pop("id"): p for p in all_points(root)}


def unused(payload: dict) -> dict:
    """Without the use counts a search adds (layers/conversation/policy/decay.py)."""
    return {k: v for k, v in payload.items() if k not in ("access_count", "last_accessed")}


def consolidate(config, *args, check=True):
    proc = run_cli("consolidate", *args, "--json", config=config, check=check)
    return json.loads(proc.stdout) if proc.stdout.strip() else None, proc


@pytest.fixture
def root(tmp_path, daemons):
    """Agents a (duplicates among many) and b (a few, half of them duplicates), written through a daemon."""
    config = init_root(tmp_path, **FAST)
    for agent in ("a", "b"):
        run_cli("agent", "add", agent, config=config)
    registry = registry_of(tmp_path)
    registry.write_text(registry.read_text().replace("can_write_public: false", "can_write_public: true"))
    daemon = daemons(config)
    wait_reachable(daemon)
    add_all(daemon, "a", [*FILLER, *DUPLICATES, *DISTINCT])
    add_all(daemon, "a", ["Qdrant 部署在 6333 端口"], visibility="public")  # another visibility: never folded
    add_all(daemon, "b", ["the build runs on kestrel", "the build runs on kestrel, as before", "周报每周五下午发出"])
    daemon.stop()
    return tmp_path, config


def test_plan_apply_and_undo_through_the_daemon(root, daemons):
    tmp_path, config = root
    before = by_id(tmp_path)
    daemon = daemons(config)
    wait_reachable(daemon)

    plan, _ = consolidate(config, "--dry-run", "--agent", "a")
    assert (plan["mode"], plan["state"], plan["agents"]["a"]["folded"]) == ("dry-run", "planned", 2)
    assert list(plan["agents"]) == ["a"] and "before" not in plan

    refused, proc = consolidate(config, "--execute", check=False)
    assert proc.returncode == 1 and refused["state"] == "refused"
    assert "agent b: 1 of its 3 valid memories (33%)" in refused["refused"] and "agent a" not in refused["refused"]

    done, _ = consolidate(config, "--execute", "--max-share", "0.4")
    assert done["state"] == "applied" and done["changed"] == 3
    with open(done["report"]) as fh:
        report = json.load(fh)
    folder = tmp_path / "state" / "consolidation"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / f"{done['run_id']}.json").stat().st_mode) == 0o600
    assert set(report["before"]) == set(report["after"]) and all(p["superseded_by"] for p in report["after"].values())
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as client:
        found = client.memory_search("a", "Qdrant 6333 端口", limit=20)["results"]
        listed = {m["id"] for m in client.get_all("a", limit=100)["results"]}
        chain = client.get_all("a", limit=100, show_superseded=True)["results"]
    superseded = {i for i, p in report["before"].items() if p["agent_id"] == "a"}
    assert len(superseded) == 2 and not {m["id"] for m in found} & superseded, "search leaves superseded ones out"
    assert not listed & superseded and superseded <= {m["id"] for m in chain}
    listed = run_cli("consolidate", "--list", config=config).stdout
    assert done["run_id"] in listed and refused["run_id"] in listed and "refused" in listed

    undone, _ = consolidate(config, "--undo", done["run_id"])
    assert undone["undo"]["restored"] == 3 and undone["state"] == "undone"
    _, proc = consolidate(config, "--undo", done["run_id"], check=False)
    assert proc.returncode == 1 and "undone already" in proc.stderr
    audit = (tmp_path / "workspace" / "logs" / "security").glob("memory-consolidation-*.log")
    lines = [json.loads(line) for path in audit for line in path.read_text().splitlines()]
    assert [e["state"] for e in lines] == ["planned", "refused", "applied", "undone"]
    assert not any("Qdrant" in json.dumps(e, ensure_ascii=False) for e in lines), "figures only, never a text"
    daemon.stop()

    after = by_id(tmp_path)
    assert after.keys() == before.keys()
    for memory_id, payload in before.items():  # the searches above counted hits: use counts aside, all equal
        assert unused(after[memory_id]) == payload, memory_id


def test_with_the_daemon_down_the_command_opens_the_store_itself(root):
    tmp_path, config = root
    done, _ = consolidate(config, "--execute", "--agent", "a")
    assert done["state"] == "applied" and done["agents"]["a"]["folded"] == 2
    points = by_id(tmp_path)
    mine = [p for p in points.values() if p["agent_id"] == "a" and p["visibility"] == "private"]
    valid = {p["data"] for p in mine if not p.get("superseded_by")}
    assert set(DISTINCT) <= valid and valid & set(DUPLICATES) == {"记一下：Qdrant 部署在 6333 端口"}
    public = [p for p in points.values() if p["visibility"] == "public"]
    assert len(public) == 1 and not public[0].get("superseded_by")


def test_bad_usage_is_refused_with_a_message(root):
    _, config = root
    for args, needle in (
        ((), "exactly one of"),
        (("--dry-run", "--execute"), "exactly one of"),
        (("--dry-run", "--force"), "--force goes with --undo"),
        (("--undo", "20260101T000000Z-abcdef", "--agent", "a"), "no --agent"),
    ):
        proc = run_cli("consolidate", *args, config=config, check=False)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)
    for run_id, needle in (("../../etc/passwd", "needs a run id"), ("20260101T000000Z-abcdef", "no consolidation run")):
        proc = run_cli("consolidate", "--undo", run_id, config=config, check=False)
        assert proc.returncode == 1 and needle in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def llm():
    server = StandInLLM(same_subject="端口")
    yield server
    server.close()


def test_with_conversation_llm_the_daemon_resolves_conflicts_and_summarises_task_logs(root, llm, daemons, monkeypatch):
    tmp_path, config = root
    data = yaml.safe_load(config.read_text())
    data["conversation"]["llm"] = {"base_url": llm.url, "model": "stand-in", "api_key_env": "TEST_LLM_KEY"}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("TEST_LLM_KEY", "llm-key")
    daemon = daemons(config, env={"TEST_LLM_KEY": "llm-key"})
    wait_reachable(daemon)
    logs = [f"部署 v{v} 到预发环境，冒烟测试通过" for v in ("2.3", "2.4", "2.5")]
    tasks = add_all(daemon, "a", logs, type="task_log", infer=False)  # stored as given: the LLM is not asked
    add_all(daemon, "a", FILLER[:6], type="task_log", infer=False)

    done, _ = consolidate(config, "--execute", "--agent", "a")

    assert done["state"] == "applied" and done["settings"]["llm"] == "stand-in"
    assert llm.calls and all(c["auth"] == "Bearer llm-key" for c in llm.calls)
    (summary,) = [c for c in done["clusters"] if c["kind"] == "tasks"]
    assert summary["action"] == "summarise" and {m["id"] for m in summary["members"]} == set(tasks)
    port = [c for c in done["clusters"] if c["kind"] == "conflict" and c["action"] == "resolve"]
    assert port and "6334" in port[0]["members"][0]["text"]
    daemon.stop()
    points = by_id(tmp_path)
    assert points[summary["created"]]["memory_type"] == "knowledge"
    assert points[summary["created"]]["data"].startswith("SUMMARY: ")
    assert all(points[t]["superseded_by"] == summary["created"] for t in tasks)
