"""Time words read in their note's time, and an undated MEMORY.md line in "the newest statement wins" (issue 50 item 3).

Each test writes a small workspace to disk, indexes its files as the daemon's indexer dates them
(:func:`daemon.local.indexer.layer_of`: a note's day from its file name or title) and searches the real index.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from daemon.local.indexer import layer_of
from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex


def _indexed(tmp_path: Path, files: dict[str, str]) -> LocalIndex:
    """The files written under ``tmp_path/workspace`` and indexed from disk."""
    workspace = tmp_path / "workspace"
    index = LocalIndex(tmp_path / "i.sqlite", Identity(embed_model=""))
    for rel, text in files.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        read = path.read_text(encoding="utf-8")
        layer, day = layer_of(rel, read)
        index.update_document(Document(rel, read, hashlib.sha256(read.encode()).hexdigest(), layer, day))
    return index


def _chat(day: str, *turns: str) -> str:
    return f"# {day} — chat between Maya and Theo\n\n" + "".join(f"- {turn}\n" for turn in turns)


def _other_days(*days: str) -> dict[str, str]:
    """Notes about something else: the question's words are in some of the chunks, not all (a word every chunk
    holds tells nothing, and weighs nothing)."""
    return {f"memory/{day}.md": _chat(day, "**Maya:** Pottery class again, a lopsided mug this time.") for day in days}


def test_last_saturday_in_a_note_is_the_saturday_before_that_note(tmp_path):
    """Asked about May 6th, the note of May 13th that says "last Saturday" answers: read in its own time that is
    May 6th.  No note is dated May 6th, and two others hold the same words."""
    files = {
        "memory/2023-04-20.md": _chat("2023-04-20", "**Theo:** The band played a show at the Rusty Anchor again."),
        "memory/2023-05-13.md": _chat(
            "2023-05-13",
            "**Maya:** How was your week?",
            "**Theo:** Bittersweet. The band played our farewell show at the Rusty Anchor last Saturday.",
            "**Maya:** Oh no, I'll miss hearing about it.",
        ),
        "memory/2023-05-20.md": _chat("2023-05-20", "**Theo:** The band might play one more show in the fall."),
        **_other_days("2023-03-04", "2023-03-18", "2023-04-01"),
    }
    with _indexed(tmp_path, files) as index:
        answer = search(index, "Which show did the band play on May 6th?", mode="fts", explain=True)
        first = answer.results[0]
        assert first["path"] == "memory/2023-05-13.md"
        assert first["focus"] == [4, 4] and first["ranks"].get("told") == 1
        assert "'last Saturday': 2023-05-06 in its note's time (2023-05-13)" in first["told"]
        assert all("told" not in r for r in answer.results[1:]), "the other notes say no day of their own"
        plain = search(index, "Which show did the band play?", mode="fts", explain=True)
        assert all("told" not in r for r in plain.results), "a question that names no day reads no line's"


def test_recently_asked_of_a_named_month_is_that_month_s_recently(tmp_path):
    """A question like "What had Hannah recently started, in March?" asks of March: its "recently" is March's,
    not the month before the newest note, and the newest statement does not win (no "recent" list).  Read as
    both, the range ran from March to the newest note and October's "recently started" came first."""
    files = {
        "memory/2024-03-09.md": _chat("2024-03-09", "**Hannah:** I've recently started a pottery class in Chinatown."),
        "memory/2024-06-15.md": _chat("2024-06-15", "**Hannah:** Pottery is going fine, a lopsided bowl this week."),
        "memory/2024-10-27.md": _chat("2024-10-27", "**Hannah:** I've recently started a running club on Sundays."),
        **_other_days("2024-02-10", "2024-05-11", "2024-08-31"),
    }
    with _indexed(tmp_path, files) as index:
        for question in (
            "What had Hannah recently started, as she told Yutong in March?",
            "What had Hannah lately started in May?",
        ):
            answer = search(index, question, mode="fts", explain=True)
            assert "recent" not in answer.lists, (question, answer.lists)
        march = search(index, "What had Hannah recently started, as she told Yutong in March?", mode="fts")
        assert march.results[0]["path"] == "memory/2024-03-09.md"
        assert march.dates is not None and (march.dates["since"], march.dates["until"]) == ("2024-03-01", "2024-03-31")
        newest = search(index, "What has Hannah recently started?", mode="fts", explain=True)
        assert newest.results[0]["path"] == "memory/2024-10-27.md", "without a month, recently is the newest notes'"


def test_recently_said_in_an_old_conversation_is_recent_to_when_it_was_said(tmp_path):
    """Theo said in March 2022 that they "recently adopted" a greyhound; the newest note, a year later, holds the
    same words about something else.  "Recently" read in the speaker's time answers with the March line, which a
    later note does not supersede; read only as the days before the newest note it would not."""
    files = {
        "memory/2022-03-05.md": _chat(
            "2022-03-05", "**Maya:** How is everything?", "**Theo:** Good! Jess and I recently adopted a greyhound."
        ),
        "memory/2022-09-10.md": _chat("2022-09-10", "**Theo:** Rocket loves the dog park by the lake."),
        "memory/2023-07-29.md": _chat("2023-07-29", "**Theo:** Jess wants to adopt a cat as well, some day."),
    }
    with _indexed(tmp_path, files) as index:
        answer = search(index, "What did Theo and Jess recently adopt?", mode="fts", explain=True)
        first = answer.results[0]
        assert first["path"] == "memory/2022-03-05.md" and first["focus"] == [4, 4]
        assert "'recently'" in first["told"] and "(2022-03-05)" in first["told"]
        assert "superseded_by" not in first
        assert answer.dates is not None and answer.dates["reference"] == "2023-07-29"


def test_recently_with_no_line_that_says_so_is_still_the_newest_notes(tmp_path):
    """A line saying "last week" is not told of a question's "recently" (a month back from every note holds some
    day of nearly every chat line): the newest note answers, as before."""
    files = {
        "memory/2022-05-02.md": _chat("2022-05-02", "**Maya:** Biscuit had his dental cleaning last week."),
        "memory/2023-07-15.md": _chat("2023-07-15", "**Maya:** Biscuit's kidney values are stable on the new food."),
    }
    with _indexed(tmp_path, files) as index:
        answer = search(index, "How has Biscuit been doing recently?", mode="fts", explain=True)
        assert answer.results[0]["path"] == "memory/2023-07-15.md"
        assert all("told" not in r for r in answer.results)


def test_an_undated_memory_line_gives_way_to_a_newer_note_that_states_its_subject_anew(tmp_path):
    """MEMORY.md names no day: its lines are background from before the notes, and the 09-15 note that moved
    Redis answers "where is it now" ahead of it, MEMORY.md's line saying where it was superseded."""
    files = {
        "MEMORY.md": "# MEMORY\n\n## Services\n\n- Redis 主节点在 redis01\n- 备份在 minio\n",
        "memory/2026-09-15.md": "# 2026-09-15\n\n## 切换\n\n- Redis 主节点切到 redis02\n",
    }
    with _indexed(tmp_path, files) as index:
        now = search(index, "Redis 主节点现在在哪", mode="fts").to_dict()["results"]
        assert [r["path"] for r in now][:2] == ["memory/2026-09-15.md", "MEMORY.md"]
        assert now[1]["superseded_by"] == "memory/2026-09-15.md:5"
        plain = search(index, "Redis 主节点", mode="fts").to_dict()["results"]
        assert all("superseded_by" not in r for r in plain), "keywords are not a question about the present"


def test_a_question_that_names_no_time_is_answered_by_the_newest_statement(tmp_path):
    """Issue 50 item 3: "where is the Redis primary?" without a "now" asks where it is, not where it was: the
    note that moved it answers before MEMORY.md's older line.  A question about the earlier state, or one that
    names a day, is left as it ranks."""
    files = {
        "MEMORY.md": "# MEMORY\n\n## Services\n\n- Redis primary node is on redis01\n- backups go to minio\n",
        "memory/2026-09-15.md": "# 2026-09-15\n\n## Failover\n\n- moved the Redis primary node to redis02\n",
        "memory/2026-09-16.md": "# 2026-09-16\n\n## Grafana\n\n- Grafana dashboards moved to port 3001\n",
        "memory/2026-09-17.md": "# 2026-09-17\n\n## Backups\n\n- the minio bucket got a lifecycle rule\n",
        "memory/2026-09-18.md": "# 2026-09-18\n\n## Sizing\n\n- the Redis primary node has 16 GB of memory\n",
    }
    with _indexed(tmp_path, files) as index:
        found = search(index, "Where is the Redis primary node?", mode="fts").to_dict()["results"]
        paths = [r["path"] for r in found]
        assert paths.index("memory/2026-09-15.md") < paths.index("MEMORY.md")
        marks = {r["path"]: r.get("superseded_by") for r in found}
        assert marks["MEMORY.md"] == "memory/2026-09-15.md:5"
        # a later line of the subject that changes nothing (another remark on it) neither wins nor is marked
        assert marks["memory/2026-09-18.md"] is None and marks["memory/2026-09-15.md"] is None
        for question in ("Where was the Redis primary node before?", "Where was the Redis primary node on 2026-09-01?"):
            found = search(index, question, mode="fts").to_dict()["results"]
            assert all("superseded_by" not in r for r in found), question


def test_an_undated_memory_line_stands_against_a_note_older_than_the_file_s_newest_day(tmp_path):
    """MEMORY.md was curated on 09-20 or later (it names that day) and still says redis01: the 09-15 note is
    the older statement, MEMORY.md's line is not superseded."""
    files = {
        "MEMORY.md": "# MEMORY\n\n## Services\n\n- Redis 主节点在 redis01\n- 2026-09-20: 备份改到 minio02\n",
        "memory/2026-09-15.md": "# 2026-09-15\n\n## 切换\n\n- Redis 主节点切到 redis02\n",
        "memory/2026-09-21.md": "# 2026-09-21\n\n## 其他\n\n- 证书续期\n",
    }
    with _indexed(tmp_path, files) as index:
        now = {r["path"]: r for r in search(index, "Redis 主节点现在在哪", mode="fts").to_dict()["results"]}
        assert "superseded_by" not in now["MEMORY.md"]
        assert now["memory/2026-09-15.md"]["superseded_by"] == "MEMORY.md:5"


def test_a_note_whose_name_claims_a_day_far_ahead_is_not_now(tmp_path):
    """``memory/2099-01-01-plan.md`` is dated 2099 by its name, as any note is: it is not the reference for
    "yesterday", and not the newest statement of what Redis is on now."""
    files = {
        "MEMORY.md": "# MEMORY\n\n- Redis 主节点在 redis01\n",
        "memory/2026-09-14.md": "# 2026-09-14\n\n- 证书续期完成\n",
        "memory/2026-09-15.md": "# 2026-09-15\n\n- Redis 主节点切到 redis02\n",
        "memory/2099-01-01-plan.md": "# 远期计划\n\n- Redis 主节点切到 redis09\n",
    }
    with _indexed(tmp_path, files) as index:
        assert index.newest_day() == "2099-01-01"  # the file's name says so; search does not take it as today
        yesterday = search(index, "What happened yesterday?", mode="fts")
        assert yesterday.dates is not None and yesterday.dates["reference"] == "2026-09-15"
        assert yesterday.results[0]["path"] == "memory/2026-09-14.md"
        now = {r["path"]: r for r in search(index, "Redis 主节点现在在哪", mode="fts").to_dict()["results"]}
        assert "superseded_by" not in now["memory/2026-09-15.md"]
        assert now["MEMORY.md"]["superseded_by"] == "memory/2026-09-15.md:3"
        assert "superseded_by" not in now["memory/2099-01-01-plan.md"]


def test_dates_that_do_not_parse_date_nothing(tmp_path):
    """A heading with a 13th month, a title with February 30th and a line naming neither a real day: no note is
    dated by them, no line is told of them, MEMORY.md's undated line still gives way, and nothing fails."""
    files = {
        "MEMORY.md": "# MEMORY\n\n## 2026-13-45 迁移\n\n- Redis 主节点在 redis01\n",
        "memory/review.md": "# 复盘 2026-02-30\n\n- Redis 主节点 2026-02-30 起在 redis03\n",
        "memory/2026-09-15.md": "# 2026-09-15\n\n- Redis 主节点切到 redis02\n- Redis 演练定在 2026-13-01\n",
    }
    with _indexed(tmp_path, files) as index:
        assert index.days_of(range(1, 10)).values() and set(index.days_of(range(1, 10)).values()) == {"2026-09-15"}
        now = {r["path"]: r for r in search(index, "Redis 主节点现在在哪", mode="fts").to_dict()["results"]}
        assert now["MEMORY.md"]["superseded_by"] == "memory/2026-09-15.md:3"
        assert "superseded_by" not in now["memory/review.md"], "an undated note outside MEMORY.md stays out"
        week = search(index, "上周 Redis 演练", mode="fts", explain=True)
        assert all("told" not in r for r in week.results)
