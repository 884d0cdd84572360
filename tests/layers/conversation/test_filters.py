"""mem0's filter language (layers/conversation/policy/filters.py): checked, ANDed with visibility, the same on
every engine.

Each filter below is run three ways over the same payloads: on a real Qdrant Edge shard
(:func:`to_edge`), on qdrant-client's own engine in memory (:func:`to_qdrant`), and by
:func:`matches` in Python; the three answers must agree, and agree with what mem0's docs say.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qdrant_client import QdrantClient, models

from layers.conversation.adapters.edge import EdgeCollection
from layers.conversation.policy import filters as f

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
        # a spoke's replica's word on who else may read a memory: no filter names it (metadata.INTERNAL)
        ({"hub_readers": "main"}, "memstrata's own field"),
        ({"OR": [{"visibility": "public"}, {"NOT": [{"hub_readers.x": "b"}]}]}, "memstrata's own field"),
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


# What a hostile caller puts where a filter takes a value or a bound: huge and non-ASCII numbers, dates
# the engines' parsers refuse, NaN and Infinity (JSON extensions Python reads), fractions to match exactly.
HOSTILE_NUMBERS = st.one_of(
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**63, 2**63 - 1, -(2**63), 2**53, 2**53 + 1, 2**64, 0, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
HOSTILE_DATES = st.one_of(
    st.sampled_from(
        [
            "٢٠٢٦-١٢-٣١",  # Arabic-Indic digits
            "２０２６-１２-３１",  # fullwidth digits
            "2026-02-30",
            "2026-13-01",
            "0000-01-01",
            "9999-12-31T23:59:59-14:00",
            "0001-01-01T00:00+05:00",
            "2026-12-31T10:00+05:30",
            "2026-12-31T24:00",
            "2026-12-31 10:00:00.1234567890123Z",
            "²⁰²⁶-¹²-³¹",
        ]
    ),
    st.datetimes(timezones=st.none() | st.timezones()).map(lambda d: d.isoformat()),
    st.from_regex(r"\A[0-9٠-٩]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?(Z|[+-][0-9]{2}:?[0-9]{2})?)?\Z"),
)
OPERANDS = st.one_of(HOSTILE_NUMBERS, HOSTILE_DATES, st.text(max_size=8), st.booleans(), st.none())
CONDITIONS = st.one_of(
    OPERANDS,
    st.lists(OPERANDS, max_size=4),
    st.dictionaries(
        st.sampled_from([*f.OPERATORS, "$gt", "between"]), OPERANDS | st.lists(OPERANDS, max_size=3), max_size=3
    ),
)
FIELDS = st.sampled_from(["rating", "created_at", "user_id", "tags", "note", "x y"])
HOSTILE_FILTERS = st.recursive(
    st.dictionaries(FIELDS, CONDITIONS, max_size=3),
    lambda inner: (
        st.dictionaries(st.sampled_from([*f.LOGICAL, "$or"]), st.lists(inner, max_size=3), max_size=2)
        | st.dictionaries(FIELDS, CONDITIONS, max_size=2)
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=HOSTILE_FILTERS)
def test_a_filter_check_takes_is_one_every_engine_takes(engines, flt):
    """Whatever :func:`check` accepts runs on Edge and on qdrant-client and in Python; the rest is FilterError.

    Before, ``{"rating": {"gt": 10**400}}`` was an OverflowError (a 500), and a fraction to match, an
    integer past 64 bits or a date Edge's parser refuses came back as the engine's own TypeError/ValueError.
    """
    shard, client = engines
    try:
        checked = f.check(flt)
    except f.FilterError:
        return
    python = {i for i, payload in enumerate(PAYLOADS) if f.matches(payload, checked)}
    engine = f.engine_part(checked)
    on_edge = {i for i in found(shard.scroll(engine, limit=100)[0]) if f.matches(PAYLOADS[i], checked)}
    points, _ = client.scroll("c", scroll_filter=f.to_qdrant(engine), limit=100)
    on_client = {i for i in found(points) if f.matches(PAYLOADS[i], checked)}
    assert on_edge == on_client == python, flt


def test_out_of_range_numbers_and_foreign_digits_are_refused_naming_the_part():
    for flt, message in (
        ({"rating": {"gt": int("9" * 401)}}, r"filters\.rating\.gt: a whole number past ±9,007,199,254,740,991"),
        ({"rating": {"lte": float("inf")}}, r"filters\.rating\.lte: a range bound must be a finite number"),
        ({"rating": {"gte": float("nan")}}, "finite number"),
        ({"rating": 2**64}, r"filters\.rating: a whole number past ±9,007,199,254,740,991"),
        ({"rating": {"in": [1, 2**53]}}, r"filters\.rating\.in\[1\]: a whole number past"),
        ({"rating": {"in": [1, 4.5]}}, "cannot be matched exactly"),
        ({"created_at": {"gt": "٢٠٢٦-١٢-٣١"}}, "ISO dates like 2026-12-31"),
        ({"created_at": {"gt": "2026-02-30"}}, "ISO dates like 2026-12-31"),
        ({"user_id": ["alice", 1]}, "all strings or all whole numbers"),
        ({"NOT": [{"user_id": "*"}]}, "restricts nothing"),  # the engines dropped it: everything matched
    ):
        with pytest.raises(f.FilterError, match=message):
            f.check(flt)
    # the largest whole number metadata holds still works, and a date with its offset after the minutes too
    assert f.check({"rating": {"lt": 2**53 - 1}}) == {"rating": {"lt": float(2**53 - 1)}}
    assert f.check({"t": {"gt": "2026-12-31T10:00+05:30"}}) == {"t": {"gt": "2026-12-31T10:00:00+05:30"}}


def test_counts_over_their_caps_are_too_large_not_merely_bad():
    with pytest.raises(f.FilterTooLargeError, match="more than 64 objects inside AND/OR/NOT; at most 64 objects"):
        f.check({"AND": [{}] * (f.MAX_CLAUSES + 1)})  # 18,000 of them fitted in a search body
    nested = {"OR": [{"AND": [{"x": 1}] * 40}, {"AND": [{"y": 1}] * 40}]}
    with pytest.raises(f.FilterTooLargeError, match="objects inside AND/OR/NOT"):
        f.check(nested)
    with pytest.raises(f.FilterTooLargeError, match="holds 257 values; at most 256 values"):
        f.check({"user_id": {"in": list(range(f.MAX_LIST + 1))}})
    assert f.check({"AND": [{"x": i} for i in range(f.MAX_CLAUSES)]})
