"""No value in a request gives a 500: a bad one is a 400 naming its field.

Before the fix these were plain-text 500s (or a dropped connection):
``expires: "9999-12-31"`` (OverflowError in the date arithmetic), ``expires:
1e308`` (TypeError, the connection reset), ``write_id: {…}`` (a dict bound into
SQLite), a body nested 100,000 deep (RecursionError), and a lone surrogate
``\\ud800`` in a query was taken as text.  Now every route checks its fields
against its schema (daemon/api/requests.py) before anything runs.

Then (issue 44) ``page=²`` on mem0's REST port (a Unicode digit passed ``str.isdigit()`` and failed
``int()``) and a 401-digit integer as a filter's range bound (``float()`` overflowed) were 500s.

The named cases are checked first; then hypothesis drives every route of the Unix socket and of
mem0's REST port (daemon/api/mem0_rest.py), body and query string, with valid values generated
from the route's own JSON schema and hostile ones put in their place (huge and negative integers,
Unicode digits, floats, NaN, filters whose operators hold such numbers): every answer is JSON, and
none is a 500.
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
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.api.mem0_rest import QUERIES as MEM0_QUERIES
from daemon.api.mem0_rest import SCHEMAS as MEM0_SCHEMAS
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
    # numbers as a query string or a careless client writes them: Unicode digits, huge, negative, fractions
    st.sampled_from(["²", "١٢", "９", "1²", "9" * 401, "-" + "9" * 401, "1e400", "-1", "0", "1.5", "NaN", "Infinity"]),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64, -(2**63) - 1, 2**53 + 1, float("nan"), float("inf")]),
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
# mem0's REST routes: every one of their optional fields must be valid (and the caller alpha) for a 200
MEM0_EXAMPLES = {"/v3/memories/add/": 120}

# mem0's filter language (layers/conversation/policy/filters.py) with hostile operands: huge and non-ASCII numbers,
# NaN and Infinity, dates the engines refuse, more parts than the caps take.
NUMBERS = st.one_of(
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64, 2**53 + 1, float("nan"), float("inf"), 1.5, -0.0]),
    st.sampled_from(["²", "١٢", "٢٠٢٦-١٢-٣١", "2026-02-30", "2026-12-31T10:00+05:30", "2026-12-31", "9" * 401]),
)
FILTERS = st.recursive(
    st.dictionaries(
        st.sampled_from(["user_id", "rating", "created_at", "category", "x y"]),
        NUMBERS
        | st.lists(NUMBERS, max_size=3)
        | st.dictionaries(
            st.sampled_from(["eq", "ne", "in", "nin", "gt", "gte", "lt", "lte", "contains", "$gt"]),
            NUMBERS | st.lists(NUMBERS, max_size=3),
            max_size=2,
        ),
        max_size=3,
    ),
    lambda inner: st.dictionaries(
        st.sampled_from(["AND", "OR", "NOT", "$or"]), st.lists(inner, max_size=3), max_size=2
    ),
    max_leaves=6,
) | st.sampled_from([{"AND": [{}] * 65}, {"user_id": {"in": list(range(257))}}, {f"k{i}": i for i in range(65)}])


# Values that reach past the checks of who may ask (a random agent id is only ever 403 or 404).
LIKELY = {
    "agent": st.sampled_from(["alpha", "alpha", "main"]),
    "q": st.sampled_from(["qdrant port", "memory", "端口"]),
    "text": st.sampled_from(["qdrant listens on 6333", "部署在 6333 端口"]),
    "expires": st.sampled_from(["2031-05-01", "2099-12-31"]),
    "infer": st.just(False),
    "filters": FILTERS,
    # mem0's REST port: the agent is the token's, messages a conversation (at most MAX_MESSAGES_PER_ADD)
    "agent_id": st.sampled_from(["alpha", "*"]),
    "user_id": st.sampled_from(["alice", "bob"]),
    "run_id": st.sampled_from(["r1", 7]),
    "expiration_date": st.sampled_from(["2031-05-01"]),
    "query": st.sampled_from(["qdrant port", "memory"]),
    "messages": st.one_of(
        st.sampled_from(["alex works nights", "部署在 6333 端口"]),
        st.sampled_from([1, 2, 100, 101]).map(
            lambda n: [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} for i in range(n)]
        ),
    ),
    "page": st.integers(-2, 5) | st.just(10**400),
    "page_size": st.integers(-2, 2000),
}


def from_schema(schema: dict, name: str = "") -> st.SearchStrategy:
    """Values a JSON schema of daemon/api/requests.py allows (the few forms pydantic writes for them)."""
    if "anyOf" in schema:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        options = st.one_of([from_schema({**rest, **option}) for option in schema["anyOf"]])
        return LIKELY[name] | options if name in LIKELY else options
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
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})), max_size=4)
    if kind == "null":
        return st.none()
    raise AssertionError(f"a schema form this test does not know: {schema}")


def _fields(schema_of: type | None) -> st.SearchStrategy[dict]:
    """A request's fields: valid ones from the route's schema, some replaced by hostile values."""
    if schema_of is None:
        return st.dictionaries(st.sampled_from(["agent_id", "extra_field"]), HOSTILE, max_size=2)
    schema = schema_of.model_json_schema()
    names = [*sorted(schema.get("properties", {})), "extra_field"]
    valid = from_schema(schema)
    hostile = st.dictionaries(st.sampled_from(names), HOSTILE, max_size=3)
    # the valid form on its own too: each route must be seen past its checks (a 200) in every run
    return valid | st.builds(lambda v, h: {**v, **h}, valid, hostile) | hostile


def _driver(
    where: Path | int,
    tokens: dict,
    memory_id: str,
    method: str,
    route: str,
    seen: Counter,
    schemas: tuple[type | None, type | None],
):
    """A hypothesis test of one route: whatever is sent, the answer is JSON and never a 500.

    ``where``: the Unix socket, or mem0's REST port; ``schemas``: the route's (body, query string)."""
    body_schema, query_schema = schemas
    in_query = method in ("GET", "DELETE")

    @settings(
        max_examples=MEM0_EXAMPLES.get(route, 80) if isinstance(where, int) else EXAMPLES.get(route, 40),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        database=None,
        derandomize=True,  # the same examples every run: "reached a 200" can never come and go by chance
    )
    @given(
        fields=st.just({}) if in_query else _fields(body_schema),
        query=_fields(query_schema) if in_query or query_schema is not None else st.just({}),
        who=st.sampled_from(["admin", "alpha", "alpha", "nobody", *(["alpha"] * 2 if isinstance(where, int) else [])]),
        target=st.one_of(st.just(memory_id), st.uuids().map(str), st.text(st.characters(codec="utf-8"), max_size=40)),
    )
    def answers_without_a_500(fields: dict, query: dict, who: str, target: str) -> None:
        headers = {"Authorization": f"Bearer {tokens.get(who, 'not-a-token')}"}
        path = _path(route, target or str(uuid.uuid4()))
        if query:
            text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in query.items()}
            path = f"{path}?{urlencode(text, errors='surrogatepass')}"
        if in_query:
            status, answer_text = _send(where, method, path, None, headers)
        else:
            content = json.dumps(fields, ensure_ascii=True).encode()  # \ud800 travels as its JSON escape
            headers["Content-Type"] = "application/json"
            status, answer_text = _send(where, method, path, content, headers)
        seen[status] += 1
        assert status != 500, f"{method} {route} {fields!r}: {answer_text}"
        answer = json.loads(answer_text)
        assert isinstance(answer, dict | list), answer_text
        if status >= 400:
            assert isinstance(answer.get("error"), str) and answer["error"], answer_text

    return answers_without_a_500


def _send(where: Path | int, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, str]:
    """One request over a raw socket (httpx refuses a URL over 64 KiB itself, http.client cannot read
    an answer that came while it was still sending), and the answer's status and text.  ``where``: the
    daemon's Unix socket, or a loopback port (which answers only a Host that names it)."""
    head = [
        f"{method} {path} HTTP/1.1",
        f"Host: localhost:{where}" if isinstance(where, int) else "Host: memstrata",
        "Connection: close",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    if body is not None:
        head.append(f"Content-Length: {len(body)}")
    if isinstance(where, int):
        conn = socket.create_connection(("127.0.0.1", where), timeout=300)
    else:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(300)
        conn.connect(str(where))
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
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    data = yaml.safe_load(config.read_text())
    data["conversation"]["mem0_api"] = {"enabled": True, "port": port}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
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

    # Issue 44: a Unicode digit as a page, a 401-digit range bound, on the socket and on mem0's port.
    rest = httpx.Client(base_url=f"http://localhost:{port}", headers={"Authorization": f"Token {tokens['alpha']}"})
    for page in ("²", "١٢", "9" * 5000, "-1", "1.5"):
        answer = rest.post("/v3/memories/", params={"page": page}, json={})
        assert answer.status_code == 400 and answer.json()["detail"].startswith("page"), (page, answer.text)
    huge = "9" * 401
    for answer in (
        rest.post("/v3/memories/search/", content=f'{{"query": "x", "filters": {{"n": {{"gt": {huge}}}}}}}'),
        http.post(
            "/v1/memories/search",
            content=f'{{"agent": "alpha", "q": "x", "filters": {{"n": {{"lte": {huge}}}}}}}',
            headers=alpha,
        ),
        http.get("/v1/memories", params={"agent": "alpha", "filters": f'{{"n": {{"gte": -{huge}}}}}'}, headers=alpha),
    ):
        assert answer.status_code == 400 and "a whole number past" in answer.text, answer.text
    too_many = http.post(
        "/v1/memories/search", json={"agent": "alpha", "q": "x", "filters": {"AND": [{}] * 65}}, headers=alpha
    )
    assert too_many.status_code == 413 and "at most 64 objects" in too_many.json()["error"], too_many.text
    rest.close()

    # Every route, generated values: the Unix socket's, then mem0's REST port's.
    def read_from(method: str, schema: type | None, query: type | None) -> tuple[type | None, type | None]:
        """(the body's schema, the query string's): GET and DELETE read only their query string."""
        return (None, schema) if method in ("GET", "DELETE") else (schema, query)

    routes = [(daemon.socket, m, r, read_from(m, SCHEMAS[m, r], None)) for m, r in SCHEMAS]
    routes += [(port, m, r, read_from(m, MEM0_SCHEMAS[m, r], MEM0_QUERIES.get((m, r)))) for m, r in MEM0_SCHEMAS]
    for where, method, route, schemas in routes:
        seen: Counter = Counter()
        fresh = http.post(
            "/v1/memories", json={"agent": "alpha", "text": f"a memory for {method} {route}"}, headers=alpha
        )
        _driver(where, tokens, fresh.json()["results"][0]["id"], method, route, seen, schemas)()
        assert seen[200] or route == "/v1/admin/restore", f"{method} {route} never got past the checks: {seen}"
    http.close()
    log = daemon.log()
    assert "answered 500" not in log and "Exception in ASGI application" not in log, log[-3000:]
