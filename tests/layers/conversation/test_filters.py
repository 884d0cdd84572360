"""mem0's filter language (layers/conversation/filters.py): checked, ANDed with visibility, the same on every engine.

Each filter below is run three ways over the same payloads: on a real Qdrant Edge shard
(:func:`to_edge`), on qdrant-client's own engine in memory (:func:`to_qdrant`), and by
:func:`matches` in Python; the three answers must agree, and agree with what mem0's docs say.
"""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient, models

from layers.conversation import filters as f
from layers.conversation.edge import EdgeCollection

PAYLOADS = [
    {"agent_id": "a", "visibility": "private", "user_id": "alice", "category": "movies", "rating": 5,
     "tags": ["sci-fi", "space"], "created_at": "2026-11-30T10:00:00+00:00", "note": "Loves Sci-Fi films"},
    {"agent_id": "a", "visibility": "public", "user_id": "bob", "category": "food", "rating": 2,
     "tags": ["ramen"], "created_at": "2026-12-01T09:00:00+00:00", "note": "ramen every friday"},
    {"agent_id": "b", "visibility": "private", "user_id": "alice", "category": "movies", "rating": 3,
     "created_at": "2026-12-02T08:00:00+00:00", "note": "thrillers are fine"},
    {"agent_id": "b", "visibility": "project", "project_id": "infra", "run_id": "r1", "rating": 4.5,
     "created_at": "2026-12-02T12:00:00+00:00"},
]  # fmt: skip
POINTS = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(len(PAYLOADS))]

CASES = [
    ({"user_id": "alice"}, {0, 2}),
    ({"user_id": "*"}, {0, 1, 2, 3}),
    ({"category": {"eq": "movies"}, "rating": {"gte": 4}}, {0}),
    ({"category": {"ne": "movies"}}, {1}),  # a missing field matches no condition (the engines' rule)
    ({"user_id": {"in": ["bob", "carol"]}}, {1}),
    ({"user_id": {"nin": ["bob"]}}, {0, 2}),
    ({"rating": {"gt": 2, "lte": 4.5}}, {2, 3}),
    ({"created_at": {"gte": "2026-12-01", "lt": "2026-12-02T10:00:00+00:00"}}, {1, 2}),
    ({"tags": "space"}, {0}),  # a list value matches when one of its items does
    ({"tags": ["ramen", "x"]}, {1}),
    ({"OR": [{"user_id": "bob"}, {"run_id": "r1"}]}, {1, 3}),
    ({"NOT": [{"user_id": "alice"}]}, {1, 3}),
    ({"AND": [{"agent_id": "a"}, {"OR": [{"rating": {"lt": 3}}, {"category": "movies"}]}]}, {0, 1}),
    ({"OR": [{"user_id": "*"}, {"rating": 1}]}, {0, 1, 2, 3}),
    ({"note": {"contains": "Sci-F"}}, {0}),  # a substring, not a word: Qdrant's MatchText would miss it
    ({"note": {"contains": "sci-f"}}, set()),  # contains is case-sensitive
    ({"note": {"icontains": "SCI-F"}}, {0}),
    ({"OR": [{"note": {"icontains": "RAMEN"}}, {"user_id": "alice", "rating": 3}]}, {1, 2}),
]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    shard = EdgeCollection(tmp_path_factory.mktemp("edge") / "s", 2)
    shard.upsert([(p, [1.0, float(i)], payload) for i, (p, payload) in enumerate(zip(POINTS, PAYLOADS, strict=True))])
    client = QdrantClient(location=":memory:")
    client.create_collection("c", vectors_config=models.VectorParams(size=2, distance=models.Distance.COSINE))
    client.upsert(
        "c",
        [
            models.PointStruct(id=p, vector=[1.0, float(i)], payload=x)
            for i, (p, x) in enumerate(zip(POINTS, PAYLOADS, strict=True))
        ],
    )
    yield shard, client
    shard.close()
    client.close()


def found(points) -> set[int]:
    return {POINTS.index(str(p.id)) for p in points}


@pytest.mark.parametrize(("flt", "expected"), CASES, ids=[str(c[0])[:60] for c in CASES])
def test_every_engine_and_python_agree_with_mem0s_meaning(engines, flt, expected):
    shard, client = engines
    checked = f.check(flt)
    python = {i for i, payload in enumerate(PAYLOADS) if f.matches(payload, checked)}
    assert python == expected
    engine = f.engine_part(checked)
    if not f.has_text_match(checked):
        assert engine == checked
    on_edge = {i for i in found(shard.scroll(engine, limit=100)[0]) if f.matches(PAYLOADS[i], checked)}
    points, _ = client.scroll("c", scroll_filter=f.to_qdrant(engine), limit=100)
    on_client = {i for i in found(points) if f.matches(PAYLOADS[i], checked)}
    assert on_edge == on_client == expected
    # the engine's part alone is never narrower than the truth (it is checked again in Python)
    assert expected <= found(shard.scroll(engine, limit=100)[0])


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"user_id": {"$in": ["a"]}}, "without '\\$'"),
        ({"rating": {"between": [1, 2]}}, "unknown operator 'between'"),
        ({"OR": {"a": 1}}, "OR takes a non-empty list"),
        ({"NOT": []}, "NOT takes a non-empty list"),
        ({"x y": 1}, "not a field name"),
        ({"rating": {"gte": "soon"}}, "ISO dates"),
        ({"rating": {"gte": 1, "lt": "2026-01-01"}}, "all numbers or all dates"),
        ({"user_id": {"in": []}}, "non-empty list"),
        ({"user_id": {"eq": {"nested": 1}}}, "must be a string, a number"),
        ({"note": {"contains": ""}}, "non-empty string"),
        ("user_id=alice", "must be an object"),
    ],
)
def test_bad_filters_are_refused_naming_the_part(flt, message):
    with pytest.raises(f.FilterError, match=message):
        f.check(flt)


def test_limits_on_depth_and_size():
    deep: dict = {"user_id": "a"}
    for _ in range(f.MAX_DEPTH):
        deep = {"AND": [deep]}
    with pytest.raises(f.FilterError, match="nest at most"):
        f.check(deep)
    with pytest.raises(f.FilterError, match="at most 64 conditions"):
        f.check({f"k{i}": i for i in range(f.MAX_CONDITIONS + 1)})
    with pytest.raises(f.FilterError, match="at most 256 values"):
        f.check({"user_id": {"in": list(range(f.MAX_LIST + 1))}})
    assert f.check({}) is None and f.check(None) is None


def test_a_callers_filter_never_widens_the_visibility_filter(engines):
    """mem0's own processing merges AND's items into the top level: {"AND": [{"agent_id": "b"}]} would replace
    the private phase's agent_id. restrict() only ever adds the caller's filter as one more AND item."""
    shard, client = engines
    private_of_a = {"visibility": "private", "agent_id": "a"}
    for hostile in (
        {"AND": [{"agent_id": "b"}]},
        {"agent_id": "b"},
        {"OR": [{"agent_id": "b"}, {"visibility": "public"}]},
        {"visibility": "*", "agent_id": "*"},
        {"NOT": [{"agent_id": "a"}]},
    ):
        combined = f.restrict(private_of_a, f.check(hostile))
        assert combined["visibility"] == "private" and combined["agent_id"] == "a"
        edge = found(shard.scroll(f.engine_part(combined), limit=100)[0])
        points, _ = client.scroll("c", scroll_filter=f.to_qdrant(f.engine_part(combined)), limit=100)
        assert edge <= {0} and found(points) <= {0}, hostile
        assert {i for i, p in enumerate(PAYLOADS) if f.matches(p, combined)} <= {0}
