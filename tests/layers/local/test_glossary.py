"""layers/local/text/glossary.py: the names a memory defines, the descriptions that point at them, and the
days of the events it names; and the search lists they make ("fts:entity", an event's day range)."""

from __future__ import annotations

import hashlib
from datetime import date

from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex
from layers.local.text.glossary import Glossary, definitions
from layers.local.text.query import parse_query

MEMORY = """# MEMORY
## Hosts
- moth — 4×A100 80GB SXM, our training box. Racked in the IDC. IP 10.88.1.11.
- 团子 (tuanzi) — 8×RTX 4090 box for eval, stays in the office server room.
- gw-01 (10.0.1.1)：入口网关，nginx + certbot，对外 443。
- qdr-02 — cloud VM that hosts our vector database (Qdrant).
- heron — CPU data box, NFS server for
  /data/datasets. Named otter before the migration.
- gw-02 — 备用网关，原名 edge-b。
## People
- 周岚 Zhou Lan — 组长, approves any spend over ¥5,000.
- Ana Ferreira — evaluation lead, works remotely from Lisbon.
## Events
- the migration / 机房搬迁 — moth moved to the IDC on 2026-08-08.
- 停电 — office power cut on 2026-07-16.
## Decisions
- 2026-09-10: backups run as systemd timers (not a definition: the head is a date).
- plain item without a separator
"""


def _glossary() -> Glossary:
    return Glossary(definitions("MEMORY.md", 1, MEMORY))


def test_definition_items_give_names_aliases_bilingual_halves_and_event_days():
    found = {d.names[0]: d for d in _glossary().items}
    hosts = {"moth", "tuanzi", "10.0.1.1", "qdr-02", "heron", "gw-02"}
    assert set(found) == hosts | {"周岚 Zhou Lan", "Ana Ferreira", "migration", "停电"}
    # a former name, on the item's continuation line or in Chinese, is a name; the description stays one line
    assert found["heron"].names == ("heron", "otter") and found["heron"].description == "CPU data box, NFS server for"
    assert found["gw-02"].names == ("gw-02", "edge-b")
    assert found["tuanzi"].names == ("tuanzi", "团子")
    assert {"周岚", "Zhou Lan"} <= set(found["周岚 Zhou Lan"].names)
    assert "Zhou" not in found["周岚 Zhou Lan"].names, "a pinyin name's first word is a family name"
    assert found["Ana Ferreira"].names == ("Ana Ferreira", "Ana"), "notes call a colleague by her first name"
    assert found["migration"].names == ("migration", "机房搬迁") and found["migration"].day == date(2026, 8, 8)
    assert found["moth"].day is None and found["moth"].line == 3


def _bridge(question: str, glossary: Glossary | None = None) -> str | None:
    query = parse_query(question)
    meant = (glossary or _glossary()).bridge([*query.optional, *query.required], question)
    return None if meant is None else meant.names[0]


def test_a_description_leads_to_the_name_and_a_named_thing_needs_no_bridge():
    assert _bridge("What is the current IP address of the A100 training box?") == "moth"
    assert _bridge("Which host runs the vector database?") == "qdr-02"
    assert _bridge("What did the evaluation colleague in Lisbon ask for?") == "Ana Ferreira"
    assert _bridge("What did the colleague in Lisbon ask for?") is None, "one word of eight definitions: too little"
    assert _bridge("Which box needs a new fan?") is None, "three of ten definitions hold 'box': it tells none apart"
    assert _bridge("What is the IP of moth?") is None, "the question names it"
    assert _bridge("What did we eat for lunch?") is None


ROLES = """# MEMORY
## 负责人
- 数据库：王磊（DBA）。网络和 Tailscale：赵强。安全审计：Tom Becker。产品和发布节奏：李娜。
- Billing: Ana Ferreira. On-call rota: Priya Nair.
- gw-01: the gateway. Runs nginx.
- redis-01 (10.0.4.20)：缓存和队列，Redis 7。
## Spare boxes
"""
ROLES += "".join(f"- box-{i:02d} — spare CPU box number {i}.\n" for i in range(14))  # 22 definitions, as with core


def test_a_roles_item_defines_each_holder_by_the_role():
    found = {d.names[0]: d for d in definitions("MEMORY.md", 1, ROLES)}
    assert found["DBA"].names == ("DBA", "王磊") and found["DBA"].description == "数据库" and found["DBA"].role
    assert found["李娜"].description == "产品和发布节奏" and found["Tom Becker"].description == "安全审计"
    assert found["Ana Ferreira"].description == "Billing" and found["Priya Nair"].role
    assert not found["gw-01"].role and found["gw-01"].description == "the gateway. Runs nginx.", (
        "one clause with a colon is a definition as before, not a roles item"
    )
    assert found["10.0.4.20"].description.startswith("缓存和队列") and not found["10.0.4.20"].role


def test_a_role_points_at_its_holder_only_from_a_question_about_a_person():
    glossary = Glossary(definitions("MEMORY.md", 1, ROLES))
    assert _bridge("负责安全审计的那位同事下一个要查什么？", glossary) == "Tom Becker"
    assert _bridge("Who handles billing questions now?", glossary) == "Ana Ferreira"
    assert _bridge("How many 数据库 connections were open at peak?", glossary) is None, "about the database"
    assert _bridge("缓存事故之后加了什么告警？", glossary) == "10.0.4.20", "a host is no person: no cue needed"


def test_a_named_thing_and_a_lone_chinese_character_describe_nothing_else():
    """ "moth 上的 NVIDIA 驱动" is about moth: not about the migration, whose description holds "moth", nor
    about the colleague who moved to 上海 (上 of 上的 is not 上 of 上海); 成都 of "成都那家公司" still is the
    vendor's city, though the question's parse leaves 成 alone (都 is a question word there)."""
    glossary = Glossary(
        definitions(
            "MEMORY.md",
            1,
            "# MEMORY\n"
            "- moth — 4×A100 80GB SXM, our training box.\n"
            "- 陈默 Chen Mo — infra engineer who built our boxes, transferred to 上海.\n"
            "- the migration — moth and otter moved to the IDC on 2026-08-08.\n"
            "- 标点数据 — the labelling vendor, based in 成都, bills per image.\n"
            "- heron — CPU data box.\n" + "".join(f"- box-{i:02d} — spare CPU box number {i}.\n" for i in range(20)),
        )
    )  # 25 definitions: a word only one of them holds is enough to bridge (layers/local/text/glossary.py, MIN_SCORE)
    assert _bridge("moth 上的 NVIDIA 驱动是哪个版本？", glossary) is None
    assert _bridge("成都那家公司一张图收多少钱？", glossary) == "标点数据"


def test_an_event_named_in_the_memory_is_a_day_range_with_its_relative_words():
    g = _glossary()
    assert g.event_days("In the week before the migration, which checkpoint was picked?") == (
        (date(2026, 8, 1), date(2026, 8, 7)),
        "migration",
    )
    assert g.event_days("停电第二天训练从哪一步接着跑？") == ((date(2026, 7, 17), date(2026, 7, 17)), "停电")
    assert g.event_days("搬机房那天几点全部恢复正常？") == ((date(2026, 8, 8), date(2026, 8, 8)), "机房搬迁")
    assert g.event_days("搬迁后的第一个工作日几点开始训练？")[0] == (date(2026, 8, 10), date(2026, 8, 10)), (
        "08-08 is a Saturday"
    )
    assert g.event_days("After the migration, why was eval slow?")[0] == (date(2026, 8, 8), date(2026, 8, 15))
    assert g.event_days("What did Ana ask for?") is None


def _doc(path: str, text: str) -> Document:
    day = path[7:17] if path.startswith("memory/") else None
    return Document(path, text, hashlib.sha256(text.encode()).hexdigest(), "daily", day)


def test_search_finds_the_note_that_names_what_the_question_describes_and_the_events_days(tmp_path):
    notes = {
        "MEMORY.md": MEMORY,
        "memory/2026-08-03.md": "## moth\n- moth up on 10.88.1.11 after the re-rack\n",
        **{
            f"memory/2026-08-{d:02d}.md": f"## day {d}\n- the plan for the office printers, round {d}\n" for d in (4, 5)
        },
        "memory/2026-08-06.md": "## eval\n- picked ckpt-4500 as the v2 candidate\n",
        "memory/2026-08-12.md": "## eval\n- picked ckpt-5200 for the ablation\n",
        "memory/2026-07-14.md": "## otter disks\n- root disk at 58%, mostly docker images\n",
        "memory/2026-07-09.md": "## eval sync\n- Ana wants every number with a bootstrap CI (1,000 resamples)\n",
    }
    with LocalIndex(tmp_path / "i.sqlite", Identity(embed_model="")) as index:
        for path, text in notes.items():
            index.update_document(_doc(path, text))
        answer = search(index, "What is the IP address of the A100 training box?", mode="fts")
        assert "fts:entity" in answer.lists
        paths = [r["path"] for r in answer.results]
        assert paths[:2] == ["MEMORY.md", "memory/2026-08-03.md"], "the definition, then the note that names moth"
        assert answer.results[1]["focus"] is None, "no word of the question is on it: only the name led there"
        # a note from before the rename names the host by its former name
        disk = search(index, "How full is the root disk of the NFS server?", mode="fts", explain=True)
        otter = next(r for r in disk.results if r["path"] == "memory/2026-07-14.md")
        assert "fts:entity" in otter["ranks"], "found as a note naming the host the question describes"
        ci = search(index, "How many resamples does the evaluation lead in Lisbon want?", mode="fts", explain=True)
        ana = next(r for r in ci.results if r["path"] == "memory/2026-07-09.md")
        assert "fts:entity" in ana["ranks"], "found as a note naming the colleague by her first name"
        week = search(index, "In the week before the migration, which checkpoint was picked?", mode="fts")
        assert week.dates is not None and (week.dates["since"], week.dates["until"]) == ("2026-08-01", "2026-08-07")
        assert week.dates["from"] == ["migration"]
        assert week.results[0]["path"] == "memory/2026-08-06.md"
