"""protocol/operations.py: each operation's request is what the clients have always sent."""

from __future__ import annotations

import dataclasses

import pytest

from protocol import operations as op
from protocol.fields import REQUIRED, describe, field
from protocol.limits import L4_PAGE, MAX_QUERY_CHARS

MEMORY = "0b7c4c57-2b6a-4f7e-9d57-3d0c1e0f8a11"


def test_every_field_of_every_operation_is_described():
    for operation in op.OPERATIONS:
        for item in describe(operation):
            assert item.help.endswith(".") and item.where in ("body", "query", "path"), (operation, item.name)
            assert item.kind in (str, int, float, bool, dict), (operation, item.name, item.kind)


def test_a_field_declared_without_a_description_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Bare(op.Operation):
        x: int = 1

    with pytest.raises(TypeError, match="not described"):
        describe(Bare)
    with pytest.raises(ValueError, match="where"):
        field("A field.", where="header")


def test_wire_names_and_bounds():
    add = {f.name: f for f in describe(op.Add)}
    assert add["memory_type"].wire == "type" and add["memory_type"].choices
    assert add["agent"].required and add["agent"].default is REQUIRED and add["infer"].default is None
    search = {f.name: f for f in describe(op.MemorySearch)}
    assert search["query"].wire == "q" and (search["limit"].low, search["limit"].high) == (1, 100)
    page = {f.name: f for f in describe(op.List)}
    assert page["limit"].results == L4_PAGE and page["limit"].default == L4_PAGE.default


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        (op.Status(), ("GET", "/v1/status", None, None)),
        (op.Search("a", "q"), ("POST", "/v1/search", None, {"agent": "a", "q": "q", "mode": "auto", "limit": 10})),
        (
            op.Search("a", "q", mode="fts", limit=3, explain=True, min_score=0.5),
            (
                "POST",
                "/v1/search",
                None,
                {"agent": "a", "q": "q", "mode": "fts", "limit": 3, "explain": True, "min_score": 0.5},
            ),
        ),
        (
            op.MemorySearch("a", "q"),
            ("POST", "/v1/memories/search", None, {"agent": "a", "q": "q", "limit": 10, "fallback": True}),
        ),
        (
            op.MemorySearch("a", "q", fallback=False, filters={"user_id": "x"}, trust_min="high"),
            (
                "POST",
                "/v1/memories/search",
                None,
                {
                    "agent": "a",
                    "q": "q",
                    "limit": 10,
                    "fallback": False,
                    "filters": {"user_id": "x"},
                    "trust_min": "high",
                },
            ),
        ),
        (
            op.Add("a", "t", memory_type="fact", infer=False),
            ("POST", "/v1/memories", None, {"agent": "a", "text": "t", "type": "fact", "infer": False}),
        ),
        (op.Update("a", MEMORY, "t"), ("PUT", f"/v1/memories/{MEMORY}", None, {"agent": "a", "text": "t"})),
        (op.Get("a", "x/../y"), ("GET", "/v1/memories/x%2F..%2Fy", {"agent": "a"}, None)),
        (op.Delete("a", MEMORY), ("DELETE", f"/v1/memories/{MEMORY}", {"agent": "a"}, None)),
        (op.History("a", MEMORY), ("GET", f"/v1/memories/{MEMORY}/history", {"agent": "a"}, None)),
        (op.RestoreMemory("a", MEMORY), ("POST", f"/v1/memories/{MEMORY}/restore", None, {"agent": "a"})),
        (
            op.List("a", filters={"user_id": "émile"}, show_expired=True, cursor=None),
            (
                "GET",
                "/v1/memories",
                {"agent": "a", "limit": 100, "filters": '{"user_id": "émile"}', "show_expired": "true"},
                None,
            ),
        ),
        (
            op.DeleteAll("a", memory_type="session", dry_run=True),
            ("DELETE", "/v1/memories", {"agent": "a", "type": "session", "dry_run": "true"}, None),
        ),
        (op.Reindex("a", rebuild=True), ("POST", "/v1/reindex", None, {"agent": "a", "rebuild": True})),
        (op.Cleanup(execute=False), ("POST", "/v1/admin/cleanup", None, {"execute": False})),
        (op.Consolidate(undo="x"), ("POST", "/v1/admin/consolidate", None, {"undo": "x"})),
        (op.Backup(keep=3), ("POST", "/v1/admin/backup", None, {"keep": 3})),
        (op.Restore("/b.tar"), ("POST", "/v1/admin/restore", None, {"path": "/b.tar"})),
    ],
)
def test_request(operation, expected):
    assert operation.request() == expected


def test_a_misspelled_option_is_a_type_error_and_a_long_query_is_left_to_the_edges():
    with pytest.raises(TypeError):
        op.Add("a", "t", memroy_type="fact")  # type: ignore[call-arg]
    # the clients refuse it before sending and the API's routes with 413 (tests/protocol/test_client.py);
    # mem0's REST search, which has no query limit, builds one
    assert len(op.MemorySearch("a", "x" * (MAX_QUERY_CHARS + 1)).query) == MAX_QUERY_CHARS + 1


def test_operations_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.Add("a", "t").text = "u"  # type: ignore[misc]
