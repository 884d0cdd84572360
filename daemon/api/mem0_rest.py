"""mem0's platform REST API, the part ``mem0.MemoryClient`` (mem0ai 2.2) calls, over the broker.

So code written for mem0's hosted platform runs against memstrata with only ``host=`` changed:
``MemoryClient(api_key=<the agent's workspace token>, host="http://127.0.0.1:8765")``.  Served on a
loopback TCP port when ``conversation.mem0_api.enabled`` is set (off by default); every request
passes the same gate as the Unix-socket API (daemon/api/gate.py: token, body limit, fair lanes).

The paths are the ones the installed client calls (see docs/mem0.md): ``GET /v1/ping/``,
``POST /v3/memories/add/``, ``POST /v3/memories/search/``, ``POST /v3/memories/`` (get_all, paged),
``GET|PUT|DELETE /v1/memories/{id}/``, ``DELETE /v1/memories/`` (delete_all) and
``GET /v1/memories/{id}/history/``.  Where memstrata differs from the platform:

- the API key is an agent's token: that agent is the caller, and an ``agent_id`` naming another
  agent is refused; ``user_id``/``run_id``/``actor_id`` are data (daemon/conversation/writes.py);
- placement is memstrata's: ``metadata.visibility``/``project_id``/``memory_type``/``expiration_date``
  place the memory (private when unsure), every other metadata key is kept as the caller's own;
- ``infer`` follows the daemon (on when it has an LLM); without one each message is stored as it is;
- ``delete_all`` wants at least one id (``agent_id`` alone: all of the caller's own memories);
- the search threshold defaults to mem0's 0.1 on the calibrated relevance scale; a search is never
  answered from the local index here (the client has no way to show ``degraded``): 503 instead;
- on a spoke with the hub away (daemon/conversation/hub.py), a search, get or get_all answered from the
  host's replica of the hub carries ``degraded: true``, ``reason`` and ``replica_age_s`` beside the
  platform's keys (mem0's client returns the JSON as it is); a history, a list, has no room for them and is
  answered by the hub only.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from daemon.api.gate import Caller, Gate
from daemon.api.requests import Fraction, JsonObject, MemFilter, Trust, Unset, parse
from daemon.api.requests import Request as Schema
from daemon.api.responses import ApiError, JSONResponse
from daemon.common.daemon_limits import (
    L4_PAGE,
    L4_RESULTS,
    MAX_MEMORY_BODY_BYTES,
    MAX_MESSAGES_PER_ADD,
    MAX_SEARCH_BODY_BYTES,
    check_count,
)
from protocol.mem0_shape import DEFAULT_THRESHOLD, MEM0_DATES, MEM0_FIELDS, PLACEMENT, mem0_metadata, memory_type_of
from protocol.operations import Add, DeleteAll, List, MemorySearch, Update

COUNT_CAP = 10_000  # get_all counts at most this many


def _few_messages(messages: object) -> object:
    """At most MAX_MESSAGES_PER_ADD (413 naming the field and the cap), counted before anything else is read."""
    check_count("messages", messages, MAX_MESSAGES_PER_ADD, "messages")
    return messages


class AddBody(Schema):
    messages: Annotated[list[dict[str, Any]] | str | dict[str, Any], BeforeValidator(_few_messages)]
    user_id: str | int | None = None
    agent_id: str | None = None
    run_id: str | int | None = None
    metadata: JsonObject | None = None
    infer: bool | None = None
    expiration_date: str | None = None


class SearchBody(Schema):
    query: str
    filters: MemFilter | None = None
    top_k: Annotated[int, Field(ge=1)] = L4_RESULTS.default
    threshold: Fraction | None = DEFAULT_THRESHOLD
    rerank: bool = False
    explain: bool = False
    show_expired: bool = False
    trust_min: Trust | None = None  # memstrata's: only memories trusted this much or more


class ListBody(Schema):
    filters: MemFilter | None = None


# A whole number in a query string, in ASCII digits: "²" passed str.isdigit() and then failed int() (a 500).
PAGE_NUMBER_MAX = 1_000_000_000
PageNumber = Annotated[int, Field(ge=1, le=PAGE_NUMBER_MAX), BeforeValidator(lambda v: 1 if v in (None, "") else v)]


class ListQuery(Schema):
    """get_all's query string (``?page=2&page_size=50``): a page past the last one is empty."""

    page: PageNumber = 1
    page_size: Annotated[
        int, Field(ge=1, le=PAGE_NUMBER_MAX), BeforeValidator(lambda v: L4_PAGE.default if v in (None, "") else v)
    ] = L4_PAGE.default


class DeleteAllQuery(Schema):
    """delete_all's query string: the mem0 ids whose memories go (checked again by the broker)."""

    agent_id: Annotated[str | None, Unset] = None
    user_id: Annotated[str | None, Unset] = None
    run_id: Annotated[str | None, Unset] = None
    actor_id: Annotated[str | None, Unset] = None


class UpdateBody(Schema):
    text: str | None = None
    metadata: JsonObject | None = None
    expiration_date: str | None = None


def mem0_view(memory: dict) -> dict:
    """A memstrata memory in the platform's result shape (memstrata's placement under ``metadata``)."""
    out: dict[str, Any] = {key: memory.get(key) for key in MEM0_FIELDS}
    out["metadata"] = mem0_metadata(memory)
    out["categories"] = []
    out.update({key: memory.get(key) for key in MEM0_DATES})
    if memory.get("score") is not None:
        out["score"] = memory["score"]
    if memory.get("score_details") is not None:
        out["score_details"] = memory["score_details"]
    return out


def degraded_of(answer: dict) -> dict:
    """A degraded answer's ``degraded``, ``reason`` and ``replica_age_s`` (a spoke's replica), else nothing."""
    if not answer.get("degraded"):
        return {}
    return {key: answer.get(key) for key in ("degraded", "reason", "replica_age_s")}


def _agent(caller: Caller, agent_id: object = None) -> str:
    """The calling agent (the API key is its token); ``agent_id`` may only name it."""
    if caller.admin or caller.id is None:
        raise ApiError(403, "mem0's API acts as one agent: use that agent's workspace token as the API key")
    if agent_id not in (None, "*") and str(agent_id).strip() != caller.id:
        raise ApiError(
            403,
            f"agent_id={agent_id!r} names another agent: this API key is agent {caller.id!r}'s token "
            "(memstrata takes the agent from the key; user_id, run_id and actor_id are data and may name anyone)",
        )
    return caller.id


def _filters(caller: Caller, filters: dict | None) -> dict | None:
    wanted = dict(filters or {})
    _agent(caller, wanted.pop("agent_id", None))
    return wanted or None


def _messages(messages: Any) -> list[dict]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, dict):
        messages = [messages]
    for i, m in enumerate(messages):
        if not isinstance(m.get("content"), str) or m.get("role") not in ("user", "assistant", "system"):
            raise ApiError(400, f"messages[{i}] needs a role (user, assistant or system) and a text content")
    return [m for m in messages if m["role"] != "system"]


# What each route reads, for tests/failure_modes/test_no_request_value_gives_a_500.py: the body's schema
# (POST, PUT) or the query's (GET, DELETE); get_all reads both.
SCHEMAS: dict[tuple[str, str], type[Schema] | None] = {
    ("GET", "/v1/ping/"): None,
    ("POST", "/v3/memories/add/"): AddBody,
    ("POST", "/v3/memories/search/"): SearchBody,
    ("POST", "/v3/memories/"): ListBody,
    ("GET", "/v1/memories/{memory_id}/"): None,
    ("PUT", "/v1/memories/{memory_id}/"): UpdateBody,
    ("DELETE", "/v1/memories/{memory_id}/"): None,
    ("DELETE", "/v1/memories/"): DeleteAllQuery,
    ("GET", "/v1/memories/{memory_id}/history/"): None,
}
QUERIES: dict[tuple[str, str], type[Schema]] = {("POST", "/v3/memories/"): ListQuery}


def build_mem0_app(daemon: Any) -> Starlette:
    """The routes; ``daemon`` as daemon/api/app.py's ``DaemonApi`` (broker, identify, guard, courtesy)."""
    gate = Gate(daemon.identify, lambda: daemon.guard.redact, daemon.courtesy)

    def broker():
        if daemon.broker is None:
            raise ApiError(503, "conversation memory is disabled (conversation.enabled: false)")
        return daemon.broker

    def ping(request: Request, caller: Caller, _args: None) -> dict:
        _agent(caller)
        # the client insists on an organisation and a project: memstrata's are the daemon and the agent
        return {"status": "ok", "org_id": "memstrata", "project_id": caller.id, "user_email": None}

    def add(request: Request, caller: Caller, args: AddBody) -> dict:
        agent = _agent(caller, args.agent_id)
        metadata = dict(args.metadata or {})
        placement = {name: metadata.pop(key, None) for key, name in PLACEMENT.items()}
        placement["memory_type"] = memory_type_of(placement["memory_type"])
        expires = args.expiration_date or metadata.pop("expiration_date", None)
        data = {
            "user_id": None if args.user_id is None else str(args.user_id),
            "run_id": None if args.run_id is None else str(args.run_id),
            "metadata": metadata or None,
            "expires": expires,
            **placement,
        }
        turns = _messages(args.messages)
        l4 = broker()
        infer = args.infer if args.infer is not None else l4.writes.llm_configured
        answers: list[tuple[dict | None, dict]] = []
        if infer:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in turns)
            answers = [(None, l4.add(Add(agent, text, infer=True, **data)))]
        else:
            for i, m in enumerate(turns):
                if i:  # each message is a write of its own: charged to this caller like further requests
                    daemon.courtesy.next_part()
                answers.append(
                    (m, l4.add(Add(agent, m["content"], infer=False, role=m["role"], actor_id=m.get("name"), **data)))
                )
        results = []
        for message, answer in answers:
            common = {"user_id": data["user_id"], "run_id": data["run_id"]}
            if message is not None:
                common.update(role=message["role"], actor_id=message.get("name"))
            if answer.get("queued"):
                results.append({"id": None, "memory": message and message["content"], "event": "QUEUED", **common})
                continue
            for r in answer.get("results") or []:
                results.append({"id": r.get("id"), "memory": r.get("memory"), "event": r.get("event"), **common})
        return {"results": results}

    def search(request: Request, caller: Caller, args: SearchBody) -> dict:
        wanted = _filters(caller, args.filters)
        o = MemorySearch(
            _agent(caller),
            args.query,  # unchecked: mem0's search has no length limit of its own (the body's size bounds it)
            limit=min(args.top_k, L4_RESULTS.high),
            fallback=False,
            filters=wanted,
            threshold=args.threshold,
            explain=args.explain,
            show_expired=args.show_expired,
            show_superseded=args.show_expired,  # mem0's "expired" is "no longer valid": a replaced fact too
            trust_min=args.trust_min,
        )
        answer = broker().search(o)
        out: dict[str, Any] = {"results": [mem0_view(m) for m in answer["results"]], **degraded_of(answer)}
        if args.rerank:
            out["rerank"] = "not applied: no reranker is configured (results are in relevance order)"
        return out

    def get_all(request: Request, caller: Caller, args: ListBody) -> dict:
        wanted = _filters(caller, args.filters)
        query = parse(ListQuery, request.query_params)
        page, size = query.page, min(query.page_size, L4_PAGE.high)
        found: list[dict] = []
        cursor = None
        degraded: dict = {}
        while len(found) < COUNT_CAP:
            if found:  # each further page of the store: charged to this caller like another request
                daemon.courtesy.next_part()
            answer = broker().get_all(List(_agent(caller), limit=L4_PAGE.high, cursor=cursor, filters=wanted))
            found += answer["results"]
            degraded = degraded_of(answer) or degraded  # any page from the replica: the whole answer is
            cursor = answer.get("next_cursor")
            if not cursor:
                break
        start = (page - 1) * size
        more = start + size < len(found)
        base = str(request.url.replace(query=""))
        return {
            "count": len(found),
            "next": f"{base}?page={page + 1}&page_size={size}" if more else None,
            "previous": f"{base}?page={page - 1}&page_size={size}" if page > 1 else None,
            "results": [mem0_view(m) for m in found[start : start + size]],
            **degraded,
        }

    def get(request: Request, caller: Caller, _args: None) -> dict:
        memory = broker().get(_agent(caller), request.path_params["memory_id"])
        return {**mem0_view(memory), **degraded_of(memory)}

    def update(request: Request, caller: Caller, args: UpdateBody) -> dict:
        agent = _agent(caller)
        if args.metadata:
            raise ApiError(400, "metadata cannot be updated here: memstrata updates a memory's text and expiry")
        memory_id = request.path_params["memory_id"]
        l4 = broker()
        text = args.text if args.text is not None else l4.get(agent, memory_id)["memory"]
        return mem0_view(l4.update(Update(agent, memory_id, text, expires=args.expiration_date)))

    def delete(request: Request, caller: Caller, _args: None) -> dict:
        broker().delete(_agent(caller), request.path_params["memory_id"])
        return {"message": "Memory deleted successfully!"}

    def delete_all(request: Request, caller: Caller, params: DeleteAllQuery) -> dict:
        agent = _agent(caller, params.agent_id)
        ids = {k: v for k in ("user_id", "run_id", "actor_id") if (v := getattr(params, k))}
        if not ids and not params.agent_id:
            raise ApiError(400, "delete_all needs user_id, run_id, actor_id or agent_id (agent_id: all of your own)")
        answer = broker().delete_all(DeleteAll(agent, **ids))
        return {"message": "Memories deleted successfully!", "deleted": answer["deleted"]}

    def history(request: Request, caller: Caller, _args: None) -> list:
        return broker().history(_agent(caller), request.path_params["memory_id"])["results"]

    memory = "/v1/memories/{memory_id}/"
    routes = [
        ("/v1/ping/", "GET", gate.route(ping, lane="status")),
        ("/v3/memories/add/", "POST", gate.route(add, schema=AddBody, body_limit=MAX_MEMORY_BODY_BYTES)),
        ("/v3/memories/search/", "POST", gate.route(search, schema=SearchBody, body_limit=MAX_SEARCH_BODY_BYTES)),
        ("/v3/memories/", "POST", gate.route(get_all, schema=ListBody, body_limit=MAX_SEARCH_BODY_BYTES)),
        (memory, "GET", gate.route(get)),
        (memory, "PUT", gate.route(update, schema=UpdateBody, body_limit=MAX_MEMORY_BODY_BYTES)),
        (memory, "DELETE", gate.route(delete)),
        ("/v1/memories/", "DELETE", gate.route(delete_all, schema=DeleteAllQuery)),
        ("/v1/memories/{memory_id}/history/", "GET", gate.route(history)),
    ]

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        message = f"no such endpoint: {request.method} {request.url.path} (memstrata serves mem0's memory API only)"
        return JSONResponse({"error": message[:1000], "detail": message[:1000]}, 404)

    # Each path is served with and without its trailing slash, and nothing is redirected: Starlette's
    # redirect sent a memory id of "/" without the slash (/v1/memories//) on to /v1/memories/, the
    # delete-all route, and a client follows a 307 with its DELETE.
    app = Starlette(
        routes=[
            Route(served, _with_detail(endpoint), methods=[method])
            for path, method, endpoint in routes
            for served in (path, path.rstrip("/"))
        ],
        exception_handlers={404: not_found, 405: not_found},
    )
    app.router.redirect_slashes = False
    return app


def _with_detail(endpoint):
    """An error answer also carries ``detail``: what mem0's client shows of a refusal."""

    async def wrapped(request: Request) -> Response:
        response = await endpoint(request)
        if response.status_code >= 400:
            try:
                body = json.loads(bytes(response.body))
            except ValueError:
                return response
            if isinstance(body, dict) and "error" in body:
                headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length",)}
                return JSONResponse({**body, "detail": body["error"]}, response.status_code, headers=headers)
        return response

    return wrapped
