"""Dates in queries: every common form becomes the day range it names (layers/local/text/dates.py)."""

from __future__ import annotations

from datetime import date

import pytest

from layers.local.ranking.hybrid_search import search
from layers.local.storage.index import Document, Identity, LocalIndex
from layers.local.text.dates import find_dates

FRIDAY = date(2026, 10, 30)


@pytest.mark.parametrize(
    ("query", "since", "until", "rest"),
    [
        ("What happened on 2026-09-08?", "2026-09-08", "2026-09-08", "What happened on ?"),
        ("9月23日出了什么事？", "2026-09-23", "2026-09-23", "出了什么事？"),
        ("九月二日的记录", "2026-09-02", "2026-09-02", "的记录"),
        ("What went wrong on Oct 21?", "2026-10-21", "2026-10-21", "What went wrong on ?"),
        ("notes from 2 September 2025", "2025-09-02", "2025-09-02", "notes from"),
        ("What did we ship last Tuesday?", "2026-10-27", "2026-10-27", "What did we ship ?"),
        ("上周三出了什么事故？", "2026-10-21", "2026-10-21", "出了什么事故？"),
        ("What happened yesterday?", "2026-10-29", "2026-10-29", "What happened ?"),
        ("前天", "2026-10-28", "2026-10-28", ""),
        ("本周 on-call", "2026-10-26", "2026-10-30", "on-call"),
        ("last week's incidents", "2026-10-19", "2026-10-25", "'s incidents"),
        # issue 50 item 3: the weekend before the reference's week, and the latest one begun by the reference
        ("What did we do last weekend?", "2026-10-24", "2026-10-25", "What did we do ?"),
        ("fixed it over the weekend", "2026-10-24", "2026-10-25", "fixed it"),
        ("Who was on call the week of 2026-09-21?", "2026-09-21", "2026-09-27", "Who was on call ?"),
        ("九月初", "2026-09-01", "2026-09-10", ""),
        ("九月中旬数据库连接", "2026-09-11", "2026-09-20", "数据库连接"),
        ("十月底的总结", "2026-10-21", "2026-10-31", "的总结"),
        ("the second week of September", "2026-09-08", "2026-09-14", ""),
        ("in early September", "2026-09-01", "2026-09-10", "in"),
        ("backups in December", "2025-12-01", "2025-12-31", "backups in"),  # no year: the latest one before
        # issue 29: a year after a month is that year's month; "May" with a year is the month, not the verb
        ("What did Maya buy in May 2022?", "2022-05-01", "2022-05-31", "What did Maya buy in ?"),
        ("What happened in December 2026?", "2026-12-01", "2026-12-31", "What happened in ?"),
        ("notes of March, 2025", "2025-03-01", "2025-03-31", "notes of"),
        ("mid-May 2025", "2025-05-11", "2025-05-20", ""),
        ("what she quit in the fall of 2025", "2025-09-01", "2025-11-30", "what she quit in"),
        ("the winter of 2025", "2025-12-01", "2026-02-28", ""),
        # "lately", "recently": the newest notes, the 30 days up to the reference
        ("What has Maya been doing lately?", "2026-09-30", "2026-10-30", "What has Maya been doing ?"),
        ("What happened to Pepper most recently?", "2026-09-30", "2026-10-30", "What happened to Pepper ?"),
        # with a time of its own, "lately" and a weekday are that time's: the month alone, the words kept
        (
            "What had Hannah lately been doing on Saturday mornings, in May?",
            "2026-05-01",
            "2026-05-31",
            "What had Hannah lately been doing on Saturday mornings, in ?",
        ),
        (
            "What had Hannah recently started, as she told Yutong in March?",
            "2026-03-01",
            "2026-03-31",
            "What had Hannah recently started, as she told Yutong in ?",
        ),
        ("四月份陈磊说他上周在做什么？", "2026-04-01", "2026-04-30", "陈磊说他上周在做什么？"),
        ("the plans of May", "2026-05-01", "2026-05-31", "the plans of"),
    ],
)
def test_a_named_day_or_period_becomes_its_range(query, since, until, rest):
    found, left = find_dates(query, FRIDAY)
    assert found is not None, query
    assert (found.since.isoformat(), found.until.isoformat(), left) == (since, until, rest)


@pytest.mark.parametrize(
    "query", ["it may work", "who may join in", "v2.4 发布", "port 6333", "2026-13-45 is not a day", "周会纪要"]
)
def test_no_date_no_range(query):
    found, left = find_dates(query, FRIDAY)
    assert found is None and left == query


def test_a_dated_question_finds_the_body_of_that_day_and_says_which_range_it_read(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        for day, body in (("2026-09-08", "log-01 磁盘写满，Loki 停止写入"), ("2026-09-09", "Loki 保留期改为 30 天")):
            text = f"# {day} 星期二\n\n## 事故\n- {body}\n"
            index.update_document(Document(f"memory/{day}.md", text, day, "daily", day))
        answer = search(index, "9月8日出了什么事？", mode="fts")
        assert [r["path"] for r in answer.results][:1] == ["memory/2026-09-08.md"]
        assert answer.dates == {
            "since": "2026-09-08",
            "until": "2026-09-08",
            "from": ["9月8日"],
            "reference": "2026-09-09",
        }
        assert search(index, "Loki", mode="fts").dates is None


def test_a_question_about_the_present_ranks_the_newest_statement_first(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        notes = {
            "2026-09-15": "pgbouncer 监听 6432 端口，应用连 db-prod-01:6432，pgbouncer 配置见 ansible",
            "2026-10-12": "pgbouncer 迁到 pgb-01，端口 6433",
        }
        for day, body in notes.items():
            index.update_document(Document(f"memory/{day}.md", f"# {day}\n\n## 变更\n- {body}\n", day, "daily", day))
        # the older note matches the words better; without a word about the present it ranks first
        assert search(index, "pgbouncer 端口", mode="fts").results[0]["path"] == "memory/2026-09-15.md"
        for question in ("pgbouncer 现在的端口", "current pgbouncer port"):
            answer = search(index, question, mode="fts", explain=True)
            assert answer.results[0]["path"] == "memory/2026-10-12.md", question
            assert "recent" in answer.lists


def test_a_month_and_year_ranks_that_month_and_its_neighbouring_days_by_their_content(tmp_path):
    """Issue 29: "May 2025" is May of 2025 (not of the newest note's year), and a note of early June that
    tells what was bought in May is inside the month's window, above the same words a year before."""
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        notes = {
            "2024-05-10": "- **Maya:** I bought a bike at the flea market.",
            "2025-05-02": "- **Maya:** Hi Theo! Long week at the hospital.",
            "2025-06-03": "- **Maya:** Guess what, I bought a used Subaru last week!",
            "2026-01-04": "- **Maya:** Happy new year!",
        }
        for day, body in notes.items():
            index.update_document(Document(f"memory/{day}.md", f"# {day}\n\n{body}\n", day, "daily", day))
        answer = search(index, "What did Maya buy in May 2025?", mode="fts")
        assert answer.dates is not None
        assert (answer.dates["since"], answer.dates["until"]) == ("2025-05-01", "2025-05-31")
        assert answer.results[0]["path"] == "memory/2025-06-03.md"


def test_lately_is_a_question_about_the_newest_notes(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        notes = {"2025-01-10": "I run every morning now", "2025-06-20": "Still running, a 10K in May"}
        for day, body in notes.items():
            index.update_document(Document(f"memory/{day}.md", f"# {day}\n\n- {body}\n", day, "daily", day))
        answer = search(index, "How is the running going lately?", mode="fts", explain=True)
        assert answer.results[0]["path"] == "memory/2025-06-20.md"
        assert answer.dates is not None and answer.dates["from"] == ["lately"]
