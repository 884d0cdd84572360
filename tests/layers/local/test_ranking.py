"""sampled_bm25 is FTS5's bm25() with the IDFs passed in: given exact counts it scores as bm25() does."""

from __future__ import annotations

import math
import random

import apsw
import pytest

from layers.local.storage import bm25 as ranking

WORDS = ["qdrant", "port", "backup", "moth", "lisbon", "gpu", "deploy", "night", "cron", "disk"]


@pytest.fixture
def table():
    """A two-column FTS5 table like the index's (contentless, ascii), 400 rows of uneven words and lengths."""
    db = apsw.Connection(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(heading, body, content='', tokenize='ascii')")
    rng = random.Random(5)
    rows = []
    for rowid in range(1, 401):
        heading = " ".join(rng.choices(WORDS[:4], k=rng.randint(0, 3)))
        body = " ".join(rng.choices(WORDS, weights=range(10, 0, -1), k=rng.randint(3, 60)))
        rows.append((rowid, heading, body))
    db.executemany("INSERT INTO t(rowid, heading, body) VALUES(?, ?, ?)", rows)
    ranking.register(db, heading_weight=3.0)
    return db


@pytest.mark.parametrize(
    "expression",
    [
        '"qdrant"',  # in more than half the rows: the IDF floor
        '"moth" AND "disk"',
        '"lisbon" OR "cron" OR "night"',
        '"backup port" AND "gpu"',  # a two-term phrase counts as one
        '"disk" OR "disk"',  # the same phrase twice weighs twice
    ],
)
def test_exact_counts_give_bm25s_scores(table, expression):
    rows = table.execute("SELECT count(*) FROM t").get
    phrases = expression.split('"')[1::2]
    counts = [table.execute("SELECT count(*) FROM t WHERE t MATCH ?", (f'"{p}"',)).get for p in phrases]
    idfs = ranking.idf_argument(rows, counts)
    theirs = table.execute(
        "SELECT rowid, bm25(t, 3.0, 1.0) FROM t WHERE t MATCH ? ORDER BY rowid", (expression,)
    ).fetchall()
    ours = table.execute(
        "SELECT rowid, sampled_bm25(t, ?) FROM t WHERE t MATCH ? ORDER BY rowid", (idfs, expression)
    ).fetchall()
    assert len(theirs) > 5
    assert [r for r, _ in ours] == [r for r, _ in theirs]
    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], rel=1e-12)


def test_idf_has_bm25s_floor():
    assert ranking.idf(1000, 10) == pytest.approx(math.log(990.5 / 10.5))
    assert ranking.idf(1000, 600) == ranking.MIN_IDF
    assert ranking.idf(0, 0) == ranking.MIN_IDF
