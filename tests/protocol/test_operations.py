"""protocol/operations.py: each operation's request is what the clients have always sent."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from protocol import operations as op
from protocol.fields import REQUIRED, describe, field
from protocol.limits import L4_PAGE, MAX_QUERY_CHARS
from tests.helpers import REPO_ROOT

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


# ---------------------------------------------------------------- made when first used (protocol/lazy_dataclass.py)


def _fresh(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (an operation class is made once per process)."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return run.stdout.strip()


def test_a_call_that_sends_one_operation_makes_only_that_one():
    """Importing the operations compiles no dataclass method; sending a search makes Search (and its base)."""
    made = _fresh(
        "from protocol import operations as op\n"
        "made = lambda: sorted(c.__name__ for c in (op.Operation, *op.OPERATIONS) if '__init__' in vars(c))\n"
        "print(made()); op.Search('a', 'q').request(); print(made())"
    ).splitlines()
    assert made == ["[]", "['Operation', 'Search']"]


@pytest.mark.parametrize("first", ["instance", "fields", "signature", "match", "subclass"])
def test_a_lazy_operation_is_the_dataclass_its_declaration_makes(first):
    """Whatever asks first (an instance, dataclasses.fields, inspect.signature, a match pattern, a subclass
    declared on it), the class is the frozen dataclass ``@dataclasses.dataclass(frozen=True)`` would make."""
    code = f"""
import dataclasses, inspect, json
from protocol import operations as op
first = {first!r}
op.Status()  # the base made first: a class must not look like a dataclass with its base's (no) fields
if first == "instance":
    asked = repr(op.Get("a", "m"))
elif first == "fields":
    asked = [f.name for f in dataclasses.fields(op.Get)]
elif first == "signature":
    asked = str(inspect.signature(op.Get))
elif first == "match":
    match op.Get("a", "m"):
        case op.Get(a, m):
            asked = [a, m]
elif first == "subclass":
    @dataclasses.dataclass(frozen=True)
    class Mine(op.Get):
        pass
    asked = [f.name for f in dataclasses.fields(Mine)]
get = op.Get("a", "m")
params = op.Get.__dataclass_params__
print(json.dumps({{
    "fields": [f.name for f in dataclasses.fields(op.Get)],
    "signature": str(inspect.signature(op.Get)),
    "match_args": list(op.Get.__match_args__),
    "frozen": params.frozen, "eq": params.eq,
    "equal": get == op.Get("a", "m") and hash(get) == hash(op.Get("a", "m")) and get != op.Get("a", "n"),
    "repr": repr(get),
    "asked first": asked,
}}))
"""
    seen = json.loads(_fresh(code))
    assert seen == {
        "fields": ["agent", "memory_id"],
        "signature": "(agent: 'str', memory_id: 'str') -> None",
        "match_args": ["agent", "memory_id"],
        "frozen": True,
        "eq": True,
        "equal": True,
        "repr": "Get(agent='a', memory_id='m')",
        "asked first": {
            "instance": "Get(agent='a', memory_id='m')",
            "fields": ["agent", "memory_id"],
            "signature": "(agent: 'str', memory_id: 'str') -> None",
            "match": ["a", "m"],
            "subclass": ["agent", "memory_id"],
        }[first],
    }


def test_threads_making_the_same_operation_at_once_all_get_it_whole():
    """The daemon's threads may send an operation's first instance together: each sees it made once, whole."""
    code = """
import threading
from protocol import operations as op
start = threading.Barrier(8)
out = []
def send():
    start.wait()
    out.append(op.Add("a", "t", visibility="private").request())
threads = [threading.Thread(target=send) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(out), len(set(map(repr, out))), out[0])
"""
    assert _fresh(code) == ("8 1 ('POST', '/v1/memories', None, {'agent': 'a', 'text': 't', 'visibility': 'private'})")
