"""Consolidation on the real Edge store with the real e5 model: fold, keep apart, refuse, undo.

The LLM, where one is asked, is tests/stand_in_llm.py (a stand-in: no LLM runs here).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from layers.conversation.adapters.store import NewMemory
from layers.conversation.consolidation.judge import LlmJudge
from layers.conversation.consolidation.nightly import UndoRefused, consolidate, undo
from layers.conversation.consolidation.plan import Thresholds
from layers.conversation.consolidation.store_view import StoreFace
from tests.stand_in_llm import StandInLLM

START = datetime(2026, 11, 1, tzinfo=timezone.utc)
FILLER = [
    "The CI pipeline fails when the cache is cold",
    "用户喜欢简洁的回答",
    "Alice prefers tea over coffee",
    "agent a keeps its scratch notes in the purple notebook",
    "备份任务每天凌晨四点运行",
    "the staging cluster has three nodes",
    "周报每周五下午发出",
    "The VPN config lives in the ops repository",
    "用户的时区是 UTC+8",
    "Grafana dashboards are exported weekly",
    "项目代号是 Lighthouse",
    "the on-call rotation changes every Monday",
]


class Memories:
    """Writes memories one by one (mem0's own add, infer off), each a minute after the last."""

    def __init__(self, store) -> None:
        self.store = store
        self.clock = START
        self.ids: dict[str, str] = {}

    def put(self, text, agent="a", visibility="private", memory_type="knowledge", project=None, trust=None) -> str:
        self.clock += timedelta(minutes=1)
        record = NewMemory(
            str(uuid.uuid4()),
            agent,
            text,
            memory_type,
            visibility,
            project,
            self.clock.isoformat(),
            None,
            None,
            trust=trust,
        )
        memory_id = self.store.add(record)[0]["id"]
        self.ids[f"{agent}/{visibility}/{text}"] = memory_id
        return memory_id

    def fill(self, agent="a", visibility="private", count: int | None = None) -> None:
        for text in FILLER[:count]:
            self.put(text, agent, visibility)


def snapshot(store) -> dict[str, dict]:
    """Every point's payload, as the engine holds it."""
    face, points, cursor = StoreFace(store), {}, None
    while True:
        page, cursor = face.scan_points(500, cursor, None)
        points.update({p.id: dict(p.payload) for p in page})
        if cursor is None:
            return points


def valid_texts(store, agent="a") -> set[str]:
    return {
        p["data"]
        for p in snapshot(store).values()
        if p.get("agent_id") == agent and not p.get("invalid_at") and not p.get("superseded_by")
    }


def run(store, execute=True, **options):
    saved = []
    report = consolidate(
        StoreFace(store), execute=execute, run_id=f"t{len(saved)}", save=lambda r: saved.append(dict(r)), **options
    )
    return report, saved


@pytest.fixture
def memories(store):
    return Memories(store)


def test_duplicates_fold_into_one_and_near_identical_distinct_facts_stay(store, memories):
    memories.fill()
    keeper = memories.put("记一下：Qdrant 部署在 6333 端口")
    memories.put("Qdrant 部署在 6333 端口")
    memories.put("Qdrant 部署在 6333 端口。")
    memories.put("Qdrant 部署在 6334 端口")
    memories.put("会议改到周三下午三点")
    memories.put("会议改到星期三下午三点！")
    memories.put("会议改到周四下午三点")
    memories.put("host kestrel-3 serves the API")
    memories.put("host kestrel-4 serves the API")
    before = valid_texts(store)

    report, _ = run(store)

    assert report["state"] == "applied"
    after = valid_texts(store)
    assert before - after == {"Qdrant 部署在 6333 端口", "Qdrant 部署在 6333 端口。", "会议改到周三下午三点"}
    for distinct in ("Qdrant 部署在 6334 端口", "会议改到周四下午三点", "host kestrel-3 serves the API"):
        assert distinct in after
    points = snapshot(store)
    folded = [p for p in points.values() if p.get("superseded_by") == keeper]
    assert len(folded) == 2 and all(p["invalid_at"] for p in folded)
    assert report["agents"]["a"]["folded"] == 3 and report["agents"]["a"]["valid_after"] == len(after)
    kinds = {tuple(sorted(m["text"] for m in c["members"])): c["kind"] for c in report["clusters"]}
    assert kinds[("Qdrant 部署在 6333 端口", "Qdrant 部署在 6333 端口。", "记一下：Qdrant 部署在 6333 端口")] == "near"
    conflicts = [c for c in report["clusters"] if c["kind"] == "conflict"]
    assert any("6334" in m["text"] for c in conflicts for m in c["members"])  # flagged, not applied
    assert all(c["action"] == "flag" and not c.get("superseded") for c in conflicts)


def test_never_across_agents_or_visibility(store, memories):
    for agent in ("a", "b"):
        memories.fill(agent)
        memories.fill(agent, "public", count=4)
        memories.put("Qdrant 部署在 6333 端口", agent)
        memories.put("Qdrant 部署在 6333 端口", agent, "public")
    memories.put("Qdrant 部署在 6333 端口", "a", "project", project="infra")
    report, _ = run(store)
    assert report["clusters"] == [] and report["actions"] == []
    assert all(not p.get("superseded_by") for p in snapshot(store).values())


def test_a_run_over_the_share_is_refused_whole(store, memories):
    memories.fill("b")
    memories.put("Qdrant 部署在 6333 端口", "b")
    memories.put("Qdrant 部署在 6333 端口。", "b")  # fine for b: 1 of 14
    for text in ("x 部署在 6333 端口", "x 部署在 6333 端口。", "x 部署在 6333 端口！", "y"):
        memories.put(text, "c")  # c would lose 2 of 4
    before = snapshot(store)

    report, saved = run(store)

    assert report["state"] == "refused" and saved[-1]["state"] == "refused"
    assert "agent c: 2 of its 4 valid memories (50%)" in report["refused"]
    assert "agent b" not in report["refused"] and "nothing was applied" in report["refused"]
    assert snapshot(store) == before
    allowed, _ = run(store, thresholds=Thresholds(max_share=0.5))
    assert allowed["state"] == "applied" and allowed["agents"]["c"]["invalidated"] == 2


def test_dry_run_plans_and_changes_nothing(store, memories):
    memories.fill()
    memories.put("the build runs on kestrel")
    memories.put("the build runs on kestrel, as before")
    before = snapshot(store)
    report, _ = run(store, execute=False)
    assert report["state"] == "planned" and report["mode"] == "dry-run"
    assert report["agents"]["a"]["folded"] == 1 and not report["before"]
    assert snapshot(store) == before


def test_undo_restores_every_payload_exactly(store, memories):
    memories.fill()
    memories.fill("b")
    for agent in ("a", "b"):
        memories.put("The backup job runs at 04:00", agent)
        memories.put("Note: the backup job runs at 04:00", agent)
        memories.put("the backup job runs at 04:00.", agent)
    before = snapshot(store)

    report, saved = run(store)
    assert report["state"] == "applied" and len(report["before"]) == 4
    assert saved[-2]["state"] == "applying" and saved[-2]["before"] == report["before"]  # on disk first
    changed = snapshot(store)
    assert changed != before

    result = undo(StoreFace(store), report, save=lambda r: None)

    assert result["restored"] == 4 and result["deleted"] == 0
    restored = snapshot(store)
    assert restored.keys() == before.keys()
    for memory_id, payload in before.items():
        assert restored[memory_id] == payload, memory_id
    with pytest.raises(UndoRefused, match="undone already"):
        undo(StoreFace(store), report, save=lambda r: None)


def test_undo_refuses_to_overwrite_a_later_change_unless_forced(store, memories):
    memories.fill()
    memories.put("the build runs on kestrel")
    memories.put("the build runs on kestrel.")
    before = snapshot(store)
    report, _ = run(store)
    (gone,) = report["actions"][0]["ids"]
    face = StoreFace(store)
    store.update(gone, "the build runs on kestrel, edited after the run")  # a later change of its text
    edited = face.payloads([gone])[gone]

    with pytest.raises(UndoRefused, match="1 memories changed since run"):
        undo(face, report, save=lambda r: None)
    assert face.payloads([gone])[gone] == edited
    result = undo(face, report, save=lambda r: None, force=True)

    assert result["forced"] and result["restored"] == 1
    now = face.payloads([gone])[gone]
    assert now["data"] == "the build runs on kestrel, edited after the run", "a forced undo keeps later edits"
    assert "state" not in now and "superseded_by" not in now and now["valid_from"] == before[gone]["valid_from"]
    others = {i: p for i, p in snapshot(store).items() if i != gone}
    assert others == {i: p for i, p in before.items() if i != gone}


@pytest.fixture
def llm():
    server = StandInLLM(same_subject="端口")
    yield server
    server.close()


def test_with_an_llm_conflicts_are_resolved_and_task_logs_summarised_and_undone(store, memories, llm):
    memories.fill()
    old = memories.put("Qdrant 部署在 6333 端口")
    new = memories.put("Qdrant 部署在 6334 端口")
    memories.put("会议改到周三下午三点")
    memories.put("会议改到周四下午三点")  # a conflict the LLM says is two facts
    for version, trust in (("2.3", "medium"), ("2.4", "low"), ("2.5", "medium")):
        memories.put(f"部署 v{version} 到预发环境，冒烟测试通过", memory_type="task_log", trust=trust)
    for text in FILLER[:9]:
        memories.put(text, memory_type="task_log")
    before = snapshot(store)

    judge = LlmJudge(llm.url, "stand-in", api_key="k")
    report, _ = run(store, judge=judge)

    assert report["state"] == "applied", report.get("refused")
    assert llm.calls and llm.calls[0]["auth"] == "Bearer k" and llm.calls[0]["path"] == "/v1/chat/completions"
    points = snapshot(store)
    assert points[old]["superseded_by"] == new and not points[new].get("superseded_by")
    weekday = [c for c in report["clusters"] if c["kind"] == "conflict" and "周四" in str(c["members"])]
    assert weekday and weekday[0]["action"] == "flag" and "hold at once" in weekday[0]["note"]
    (tasks,) = [c for c in report["clusters"] if c["kind"] == "tasks"]
    assert tasks["action"] == "summarise" and len(tasks["members"]) == 3
    summary = points[tasks["created"]]
    assert summary["data"].startswith("SUMMARY: 部署 v2.3") and summary["memory_type"] == "knowledge"
    assert (summary["agent_id"], summary["visibility"]) == ("a", "private")
    assert (summary["trust"], summary["provenance"]) == ("low", "inferred")  # as its least trusted log
    assert all(points[m["id"]]["superseded_by"] == tasks["created"] for m in tasks["members"])
    assert report["agents"]["a"]["added"] == 1 and report["agents"]["a"]["resolved"] == 1

    undo(StoreFace(store), report, save=lambda r: None)
    assert snapshot(store) == before


def test_an_unusable_llm_answer_applies_nothing_of_that_finding(store, memories, llm):
    memories.fill()
    old = memories.put("Qdrant 部署在 6333 端口")
    memories.put("Qdrant 部署在 6334 端口")
    llm.answer = lambda prompt: '{"outdated": [{"index": 7, "replaced_by": 0}]}'
    report, _ = run(store, judge=LlmJudge(llm.url, "stand-in"))
    (conflict,) = [c for c in report["clusters"] if c["kind"] == "conflict"]
    assert conflict["action"] == "flag" and "not asked about" in conflict["note"]
    assert not snapshot(store)[old].get("superseded_by")


class CrashingFace(StoreFace):
    """The real store, failing on the second supersede: a run cut off halfway through its batch."""

    calls = 0

    def supersede(self, old_ids, by_id, at):
        self.calls += 1
        if self.calls == 2:
            raise OSError("the disk went away")
        super().supersede(old_ids, by_id, at)


def test_a_run_cut_off_halfway_is_undone_from_its_report(store, memories):
    memories.fill()
    memories.put("the build runs on kestrel")
    memories.put("the build runs on kestrel.")
    memories.put("会议改到周三下午三点")
    memories.put("会议改到周三下午三点！")
    before = snapshot(store)
    saved = []
    with pytest.raises(OSError, match="disk went away"):
        consolidate(CrashingFace(store), execute=True, run_id="cut", save=lambda r: saved.append(dict(r)))
    report = saved[-1]
    assert report["state"] == "applying" and len(report["before"]) == 2  # on disk before the first change
    assert snapshot(store) != before  # one of the two was superseded

    undo(StoreFace(store), report, save=lambda r: None)
    assert snapshot(store) == before
