"""What a write sends with its text is stored as sent or refused, never dropped or rounded (issue 44, item 9).

Over the real API, in process (tests/daemon/conversation/l4_api.py).  Before the fix:

- 9a: the same text written again with other metadata was a silent NOOP: the new metadata was lost and
  a filter on it found nothing.  Now a NOOP is answered only when the stored memory already holds
  everything the write would store (its ids, role, metadata, trust, source); otherwise the write is a
  memory of its own (mem0's ``add`` stores each write), found by a filter on what it carries.
- 9b: a whole number in metadata past 2^53 could come back rounded (past 64 bits the embedded engine
  keeps it as a double; JSON readers and range filters take numbers as doubles).  Now such a number is
  refused with a 400 naming where it is, in a write's metadata and in a filter alike, and every number
  inside the bound is stored and returned exactly.

The reported cases come first, then hypothesis generates metadata and filters of big, negative and
nested numbers, and bodies whose numbers are written with non-ASCII digits.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layers.conversation.policy.metadata import MAX_EXACT_INTEGER
from tests.daemon.conversation.l4_api import MEMORIES, Api, l4_api

_numbers = itertools.count()


@pytest.fixture(scope="module")
def api(_service_template, tmp_path_factory) -> Iterator[Api]:
    with l4_api(_service_template, tmp_path_factory.mktemp("l4-metadata") / "root") as api:
        yield api


def _text(what: str) -> str:
    """A text no other test or example of this module wrote (so dedup meets only what the test means)."""
    return f"{what} (#{next(_numbers)})"


def _result(response) -> dict:
    assert response.status_code == 200, response.text
    [result] = response.json()["results"]
    return result


# ---------------------------------------------------------------- 9a: the same text with other data


def test_the_same_text_with_other_metadata_is_stored_and_its_filter_finds_it(api):
    text = _text("Alice likes green tea")
    first = _result(api.add("main", "main", text, metadata={"category": "drinks"}))
    assert first["event"] == "ADD"
    again = _result(api.add("main", "main", "  " + text.upper() + " ", metadata={"category": "drinks"}))
    assert (again["event"], again["id"]) == ("NOOP", first["id"]), "a restatement with the same data is a NOOP"

    other = _result(api.add("main", "main", text, metadata={"category": "preferences"}))
    assert other["event"] == "ADD" and other["id"] != first["id"], "other metadata: a memory of its own"
    assert api.listed("main", {"category": "preferences"}) == [other["id"]]
    assert api.listed("main", {"category": "drinks"}) == [first["id"]]
    assert api.stored(first["id"])["metadata"] == {"category": "drinks"}, "the first one is unchanged"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"metadata": {"flag": 1}}, {"metadata": {"flag": True}}),  # equal in Python, not in JSON
        ({"metadata": {"n": 1}}, {"metadata": {"n": 1.0}}),
        ({}, {"metadata": {"source_doc": "runbook"}}),
        ({"actor_id": "alice"}, {"actor_id": "bob"}),
        ({}, {"role": "assistant"}),
        ({}, {"trust": "low"}),
        ({}, {"source": "tool_result"}),
    ],
    ids=["bool-vs-int", "int-vs-float", "none-vs-some", "actor", "role", "trust", "source"],
)
def test_a_restatement_is_a_noop_only_when_nothing_it_carries_would_be_lost(api, first, second):
    text = _text("the standup moved to 09:30")
    original = _result(api.add("main", "main", text, **first))
    restated = _result(api.add("main", "main", text, **second))
    assert restated["event"] == "ADD" and restated["id"] != original["id"]
    assert _result(api.add("main", "main", text, **second))["event"] == "NOOP", "the same again is a NOOP"


def test_restating_a_replaced_fact_is_a_new_valid_memory_not_a_noop_on_the_replaced_one(api):
    old = _text("the staging port is 6333")
    first = api.added("main", "main", old)
    second = api.added("main", "main", _text("the staging port is 6334"), supersedes=first)
    back = _result(api.add("main", "main", old))
    assert back["event"] == "ADD" and back["id"] not in (first, second)
    assert api.stored(back["id"])["state"] == "valid" and back["id"] in api.search("main", "staging port")
    cycle = api.add("main", "main", old, supersedes=second)  # dedup can no longer hand back the replaced one
    assert _result(cycle)["id"] not in (first, second) and api.stored(second)["superseded_by"] is not None
    assert api.stored(first)["superseded_by"] == second, "first stays replaced by second: no cycle"


@settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    one=st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, "1", "x"])),
    ),
    two=st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, "1", "x"])),
    ),
)
def test_generated_metadata_pairs_are_a_noop_exactly_when_equal_as_json(api, one, two):
    text = _text("the printer on floor 3 jams")
    first = _result(api.add("main", "main", text, metadata=one))
    second = _result(api.add("main", "main", text, metadata=two))
    same = json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    assert (second["event"], second["id"] == first["id"]) == (("NOOP", True) if same else ("ADD", False))
    assert json.dumps(api.stored(second["id"])["metadata"], sort_keys=True) == json.dumps(two, sort_keys=True)


# ---------------------------------------------------------------- 9b: numbers are exact or refused


def test_an_integer_past_2_53_in_metadata_is_refused_naming_its_field_and_nothing_is_stored(api):
    text = _text("the ticket counter")
    before = api.listed("main", {})
    refused = api.add("main", "main", text, metadata={"counter": 2**53 + 1})
    assert refused.status_code == 400 and "metadata.counter" in refused.json()["error"]
    assert str(2**53 + 1) not in refused.text, "the value is never quoted"
    assert api.listed("main", {}) == before, "nothing stored"

    kept = _result(api.add("main", "main", text, metadata={"counter": 2**53 - 1, "low": -(2**53 - 1)}))
    stored = api.stored(kept["id"])["metadata"]
    assert stored == {"counter": 2**53 - 1, "low": -(2**53 - 1)} and isinstance(stored["counter"], int)
    got = api.call("main", "GET", f"{MEMORIES}/{kept['id']}", params={"agent": "main"})
    assert '"counter":9007199254740991' in got.text.replace(" ", ""), "the answer's JSON holds the exact number"
    assert api.listed("main", {"counter": 2**53 - 1}) == [kept["id"]]


@pytest.mark.parametrize(
    "filters",
    [{"counter": 2**53 + 1}, {"counter": {"gte": 2**60}}, {"AND": [{"n": {"in": [1, -(2**64)]}}]}],
    ids=["equal", "range", "nested-in"],
)
def test_an_integer_past_2_53_in_a_filter_is_refused_naming_where(api, filters):
    for response in (
        api.call("main", "POST", f"{MEMORIES}/search", json={"agent": "main", "q": "counter", "filters": filters}),
        api.call("main", "GET", MEMORIES, params={"agent": "main", "filters": json.dumps(filters)}),
    ):
        assert response.status_code == 400 and "filters." in response.json()["error"], response.text
        assert "2^53" in response.json()["error"]


def _paths_of_big(value: object, where: str) -> list[str]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [where] if abs(value) > MAX_EXACT_INTEGER else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths_of_big(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _paths_of_big(v, f"{where}[{i}]")]
    return []


BIG_OR_NOT = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53 - 1, 2**53, 2**53 + 1, -(2**53), 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 0, -1]),
    st.integers(-(2**53) + 1, 2**53 - 1),
)
NUMBERS = st.recursive(
    BIG_OR_NOT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz"), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metadata=st.dictionaries(st.sampled_from(["n", "m", "count", "ids"]), NUMBERS, min_size=1, max_size=3))
def test_generated_numbers_in_metadata_are_stored_exactly_or_refused_naming_one(api, metadata):
    response = api.add("main", "main", _text("a note with numbers"), metadata=metadata)
    big = _paths_of_big(metadata, "metadata")
    if response.status_code == 400 and "nest at most" in response.json()["error"]:
        return  # nested past MAX_DEPTH: a refusal of its own (it may come first), never a 500
    if big:
        assert response.status_code == 400, response.text
        assert any(path in response.json()["error"] for path in big), (response.text, big)
        return
    [result] = response.json()["results"]
    stored = api.stored(result["id"])["metadata"]
    assert json.dumps(stored, sort_keys=True) == json.dumps(metadata, sort_keys=True), "exact: no float"


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    filters=st.dictionaries(
        st.sampled_from(["n", "m"]),
        NUMBERS | st.dictionaries(st.sampled_from(["gte", "lt", "eq", "ne"]), BIG_OR_NOT, min_size=1, max_size=2),
        min_size=1,
        max_size=2,
    )
)
def test_generated_numbers_in_filters_are_refused_when_past_2_53_and_never_a_500(api, filters):
    response = api.call(
        "main", "POST", f"{MEMORIES}/search", json={"agent": "main", "q": "numbers", "filters": filters}
    )
    big = _paths_of_big(filters, "filters")
    assert response.status_code in (200, 400), response.text
    if big:
        assert response.status_code == 400 and any(p in response.json()["error"] for p in big), response.text


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(digits=st.text(st.characters(categories=["Nd"]), min_size=1, max_size=12), negative=st.booleans())
def test_numbers_written_with_any_digits_are_stored_exactly_or_refused(api, digits, negative):
    """A JSON number has ASCII digits only: another script's digits (١٢٣, １２３) are not JSON (400); as a
    string they are text, kept as sent; in ASCII they are a number, kept exactly or refused past 2^53."""
    literal = ("-" if negative else "") + digits
    text = _text("digits")
    body = '{"agent": "main", "text": ' + json.dumps(text) + ', "metadata": {"n": ' + literal + "}}"
    raw = api.call("main", "POST", MEMORIES, content=body.encode(), headers={"Content-Type": "application/json"})
    ascii_number = digits.isascii() and (digits == "0" or not digits.startswith("0"))
    if not ascii_number:
        assert raw.status_code == 400 and "not JSON" in raw.json()["error"], raw.text
    elif abs(int(literal)) > MAX_EXACT_INTEGER:
        assert raw.status_code == 400 and "metadata.n" in raw.json()["error"]
    else:
        stored = api.stored(_result(raw)["id"])["metadata"]
        assert stored == {"n": int(literal)} and isinstance(stored["n"], int)

    as_text = _result(api.add("main", "main", _text("digits as text"), metadata={"n": literal}))
    assert api.stored(as_text["id"])["metadata"] == {"n": literal}, "a string of digits stays the string sent"
