"""No value in a request gives a 500: a bad one is a 400 naming its field.

Before the fix these were plain-text 500s (or a dropped connection):
``expires: "9999-12-31"`` (OverflowError in the date arithmetic), ``expires:
1e308`` (TypeError, the connection reset), ``write_id: {…}`` (a dict bound into
SQLite), a body nested 100,000 deep (RecursionError), and a lone surrogate
``\\ud800`` in a query was taken as text.  Now every route checks its fields
against its schema (daemon/api/requests.py) before anything runs.

The named cases are checked first; then hypothesis drives every route, with
valid values generated from the route's own JSON schema
and hostile ones put in their place: every answer is JSON, and none is a 500.
"""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.api.requests import SCHEMAS
from tests.helpers import FAST, init_root, run_cli, token_of, wait_reachable

pytestmark = pytest.mark.slow

# What a hostile caller puts in a field instead of what the schema asks for.
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, "9999-12-31", "0001-01-01", "2026-02-30", "\ud800", "a\udfffb", "", " ", "\x00"]),
    st.text(max_size=50),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Cc"]), max_size=5),
    st.integers(60_000, 70_000).map(lambda n: "p" * n),
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ),
)
EXAMPLES = {"/v1/admin/backup": 8, "/v1/admin/restore": 20, "/v1/reindex": 15}  # the slow ones, fewer times


# Values that reach past the checks of who may ask (a random agent id is only ever 403 or 404).
LIKELY = {
    "agent": st.sampled_from(["alpha", "alpha", "main"]),
    "q": st.sampled_from(["qdrant port", "memory", "端口"]),
    "text": st.sampled_from(["qdrant listens on 6333", "部署在 6333 端口"]),
    "expires": st.sampled_from(["2031-05-01", "2099-12-31"]),
    "infer": st.just(False),
}


def from_schema(schema: dict, name: str = "") -> st.SearchStrategy:
    """Values a JSON schema of daemon/api/requests.py allows (the few forms pydantic writes for them)."""
    if "anyOf" in schema:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return st.one_of([from_schema({**rest, **option}, name) for option in schema["anyOf"]])
    if schema.get("enum"):
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        properties = {key: from_schema(s, key) for key, s in schema.get("properties", {}).items()}
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: v for k, v in properties.items() if k in required},
            optional={k: v for k, v in properties.items() if k not in required},
        )
    if name in LIKELY and kind not in (None, "null"):
        return LIKELY[name] | from_schema(schema)
    if kind == "string":
        low, high = schema.get("minLength", 0), min(schema.get("maxLength", 200), 200)
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: low <= len(s) <= high)
        return st.text(min_size=low, max_size=high)
    if kind == "integer":
        return st.integers(min_value=schema.get("minimum"), max_value=10**6)
    if kind == "number":
        return st.floats(min_value=schema.get("minimum"), max_value=schema.get("maximum"), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    raise AssertionError(f"a schema form this test does not know: {schema}")


def _fields(method: str, route: str) -> st.SearchStrategy[dict]:
    """A request's fields: valid ones from the route's schema, some replaced by hostile values."""
    schema = SCHEMAS[(method, route)].model_json_schema()
    names = [*sorted(schema.get("properties", {})), "extra_field"]
    valid = from_schema(schema)
    hostile = st.dictionaries(st.sampled_from(names), HOSTILE, max_size=3)
    return st.builds(lambda v, h: {**v, **h}, valid, hostile) | hostile


def _driver(sock: Path, tokens: dict, memory_id: str, method: str, route: str, seen: Counter):
    """A hypothesis test of one route: whatever is sent, the answer is JSON and never a 500."""

    @settings(
        max_examples=EXAMPLES.get(route, 40),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        database=None,
    )
    @given(
        fields=_fields(method, route),
        who=st.sampled_from(["admin", "alpha", "alpha", "nobody"]),
        target=st.one_of(st.just(memory_id), st.uuids().map(str), st.text(st.characters(codec="utf-8"), max_size=40)),
    )
    def answers_without_a_500(fields: dict, who: str, target: str) -> None:
        headers = {"Authorization": f"Bearer {tokens.get(who, 'not-a-token')}"}
        path = _path(route, target or str(uuid.uuid4()))
        if method in ("GET", "DELETE"):
            text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
            status, answer_text = _send(
                sock, method, f"{path}?{urlencode(text, errors='surrogatepass')}", None, headers
            )
        else:
            content = json.dumps(fields, ensure_ascii=True).encode()  # \ud800 travels as its JSON escape
            headers["Content-Type"] = "application/json"
            status, answer_text = _send(sock, method, path, content, headers)
        seen[status] += 1
        assert status != 500, f"{method} {route} {fields!r}: {answer_text}"
        answer = json.loads(answer_text)
        assert isinstance(answer, dict), answer_text
        if status >= 400:
            assert isinstance(answer.get("error"), str) and answer["error"], answer_text

    return answers_without_a_500


def _send(sock: Path, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, str]:
    """One request over a raw socket (httpx refuses a URL over 64 KiB itself, http.client cannot read
    an answer that came while it was still sending), and the answer's status and text."""
    head = [
        f"{method} {path} HTTP/1.1",
        "Host: memstrata",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    if body is not None:
        head.append(f"Content-Length: {len(body)}")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(300)
    conn.connect(str(sock))
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before all of it was read
            conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := conn.recv(65536):
                data += chunk
    finally:
        conn.close()
    status_line, _, rest = data.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 "), f"no answer to {method} {path[:200]}: {data[:200]!r}"
    headers_text, _, answer = rest.partition(b"\r\n\r\n")
    assert b"chunked" not in headers_text.lower(), headers_text
    return int(status_line.split()[1]), answer.decode()


def _path(route: str, memory_id: str) -> str:
    return route.replace("{memory_id}", quote(memory_id, safe=""))


def test_no_request_value_gives_a_500(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "alpha", config=config)
    daemon = daemons(config)
    wait_reachable(daemon)
    tokens = {"admin": daemon.admin_token(), "alpha": token_of(tmp_path, "alpha")}
    http = httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)), base_url="http://memstrata", timeout=120)
    alpha = {"Authorization": f"Bearer {tokens['alpha']}"}
    stored = http.post("/v1/memories", json={"agent": "alpha", "text": "the first memory"}, headers=alpha).json()
    memory_id = stored["results"][0]["id"]

    def refused(response: httpx.Response, field: str) -> None:
        assert response.status_code == 400, response.text
        assert response.json()["error"].startswith(field), response.text

    # The cases that were 500s.
    add = {"agent": "alpha", "text": "a note"}
    refused(http.post("/v1/memories", json={**add, "expires": "9999-12-31"}, headers=alpha), "expires")
    refused(http.post("/v1/memories", json={**add, "expires": 1e308}, headers=alpha), "expires")
    refused(http.post("/v1/memories", json={**add, "write_id": {"a": 1}}, headers=alpha), "write_id")
    put = http.put(f"/v1/memories/{memory_id}", json={**add, "expires": "9999-12-31"}, headers=alpha)
    refused(put, "expires")
    for route in ("/v1/search", "/v1/memories/search"):
        surrogate = b'{"agent": "alpha", "q": "qdrant \\ud800 port"}'
        refused(http.post(route, content=surrogate, headers=alpha), "q")
    deep = b'{"agent": "alpha", "text": ' + b"[" * 60_000 + b"]" * 60_000 + b"}"  # within the body limit
    answer = http.post("/v1/memories", content=deep, headers=alpha)
    assert answer.status_code == 400 and "nests too deeply" in answer.json()["error"], answer.text
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # the 100,000-deep body: over the limit, unread
    raw.connect(str(daemon.socket))
    body = b'{"agent": "alpha", "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    raw.sendall(
        f"POST /v1/memories HTTP/1.1\r\nHost: m\r\nAuthorization: Bearer {tokens['alpha']}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    assert raw.recv(100).startswith(b"HTTP/1.1 413"), "refused from its declared length"
    raw.close()
    # A memory id of "/" was an empty 307 to the collection ("/v1/memories//" → "/v1/memories"): a client
    # following it with DELETE would have asked to delete every memory.  It is a JSON 404, like any other path.
    for method in ("GET", "DELETE", "PUT"):
        body = json.dumps(add).encode() if method == "PUT" else None
        sent = {**alpha, "Content-Type": "application/json"}
        status, text = _send(daemon.socket, method, _path("/v1/memories/{memory_id}", "/"), body, sent)
        assert status == 404 and "no such endpoint" in json.loads(text)["error"], text

    # Every route, generated values.
    for method, route in SCHEMAS:
        seen: Counter = Counter()
        fresh = http.post(
            "/v1/memories", json={"agent": "alpha", "text": f"a memory for {method} {route}"}, headers=alpha
        )
        _driver(daemon.socket, tokens, fresh.json()["results"][0]["id"], method, route, seen)()
        assert seen[200] or route == "/v1/admin/restore", f"{method} {route} never got past the checks: {seen}"
    http.close()
    log = daemon.log()
    assert "answered 500" not in log and "Exception in ASGI application" not in log, log[-3000:]
