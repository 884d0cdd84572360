"""What every API request passes before its work runs, in this order, each step as cheap as it can be.

1. Who is asking, from the ``Authorization`` header alone: a request without a
   valid token is refused (401) before a byte of its body is read, as is a
   request for an administrator's route without the administrator's token (403).
   Before this, ``POST /v1/memories`` read and parsed a 100 MB body first and
   four such requests without a token took the daemon from 446 to 1,032 MB.
2. The route's body limit (daemon/common/daemon_limits.py), from the declared
   ``Content-Length`` before reading (413), and counted while reading a body
   sent without one; a route that takes no body takes none.  A refusal before
   the body is read closes the connection, so the rest is never received.
3. The body as JSON and every field against the route's schema
   (daemon/api/requests.py): 400 naming the field.
4. The caller's turn (daemon/api/fairness.py): each token's requests run a few at a
   time, the callers in turn; a caller with too many waiting gets 429 and
   Retry-After.  Status, maintenance and the rest each have their own lane, so
   a long reindex never holds up a search or a status.

The work then runs on a thread of its lane, and its answer is rendered there too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar, cast

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from daemon.api.fairness import Busy, Courtesy, FairScheduler
from daemon.api.requests import Request as RequestSchema
from daemon.api.requests import json_body, parse
from daemon.api.responses import ApiError, JSONResponse, as_response
from daemon.common.audit import acting_for
from daemon.common.daemon_limits import PER_CALLER_QUEUED, PER_CALLER_RUNNING, WORK_THREADS
from daemon.common.echo import Redact
from daemon.common.tokens import ADMIN

Who = Literal["anyone", "agent", "admin"]
Lane = Literal["work", "status", "maintenance"]
ANONYMOUS = "(no token)"  # the key callers without a valid token share in the status lane
#: The arguments a route's work takes: its schema's model, or None for a route without one.
Args = TypeVar("Args", bound="RequestSchema | None")


def _model(schema: type[Args]) -> type[RequestSchema]:
    """A route's schema, given (not None): the model its arguments are parsed into."""
    return cast("type[RequestSchema]", schema)


@dataclass(frozen=True)
class Caller:
    """Who sent a request: an agent id, :data:`~daemon.common.tokens.ADMIN`, or None (no valid token)."""

    id: str | None
    token_given: bool

    @property
    def admin(self) -> bool:
        return self.id == ADMIN


def token_of(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    # "Token" is mem0's scheme (its MemoryClient sends ``Authorization: Token <api key>``)
    return token.strip() if scheme.lower() in ("bearer", "token") and token.strip() else None


def _lanes(courtesy: Courtesy) -> dict[Lane, FairScheduler]:
    def work_share(caller: Hashable) -> int:
        return 4 if caller == ADMIN else PER_CALLER_RUNNING  # the operator's own commands are no flood

    return {
        "work": FairScheduler(WORK_THREADS, work_share, PER_CALLER_QUEUED, courtesy),
        "status": FairScheduler(4, lambda caller: 2, 64),
        # keyed by (caller, route): one reindex, cleanup, backup or restore of each caller at a time
        "maintenance": FairScheduler(4, lambda caller: 1, 8),
    }


def sends_body(request: Request) -> bool:
    """Whether the request comes with a body (a refusal before it is read closes the connection)."""
    declared = request.headers.get("content-length")
    chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
    return chunked or (declared is not None and declared.strip() not in ("", "0"))


class Gate:
    """Builds the endpoints: the steps above around each route's work."""

    def __init__(
        self, identify: Callable[[str | None], str | None], redact: Callable[[], Redact], courtesy: Courtesy
    ) -> None:
        self.identify = identify
        self.redact = redact  # the never_store patterns in force, for error messages
        self.lanes = _lanes(courtesy)

    def route(
        self,
        work: Callable[[Request, Caller, Args], object],
        *,
        schema: type[Args] | None = None,
        body_limit: int = 0,
        who: Who = "agent",
        lane: Lane = "work",
    ) -> Callable[[Request], object]:
        """An endpoint running ``work(request, caller, args)`` once the request has passed the gate."""

        async def endpoint(request: Request) -> Response:
            try:
                caller = self._caller(request, who, body_limit)
                args: RequestSchema | None
                if schema is None:
                    args = None
                elif body_limit:
                    fields = self.fields(request, caller, json_body(await self._body(request, body_limit)))
                    args = self.arguments(caller, parse(_model(schema), fields))
                else:
                    args = self.arguments(
                        caller, parse(_model(schema), self.fields(request, caller, request.query_params))
                    )
                key: Hashable = caller.id or ANONYMOUS
                if lane == "maintenance":
                    key = (key, request.url.path)
                try:
                    return await self.lanes[lane].run(key, self._answer, work, request, caller, args)
                except Busy as exc:
                    raise ApiError(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
            except Exception as exc:  # every failure answers in JSON, here, not in a middleware
                return as_response(exc, request, self.redact())

        return endpoint

    def _answer(self, work, request: Request, caller: Caller, args) -> Response:
        """On the lane's thread: the work, and its answer rendered (JSON of a search is not free).
        What the work writes to the audit log names its caller as the actor (daemon/common/audit.py)."""
        try:
            with acting_for(caller.id):
                answer = work(request, caller, args)
            return answer if isinstance(answer, Response) else JSONResponse(answer)
        except Exception as exc:
            return as_response(exc, request, self.redact())

    # What a gate of another kind (the hub's peer API: daemon/api/peer.py) decides otherwise: who the caller
    # is, and the request's fields before and after its schema reads them.

    def who(self, request: Request) -> Caller:
        """The agent (or the administrator) the request's token belongs to; None for nobody."""
        token = token_of(request)
        return Caller(self.identify(token), token is not None)

    def fields(self, request: Request, caller: Caller, fields: Mapping[str, object]) -> Mapping[str, object]:
        """The request's fields (its JSON body or its query) as the route's schema reads them."""
        return fields

    def arguments(self, caller: Caller, args: RequestSchema) -> RequestSchema:
        """The route's arguments, once its schema has read and checked them."""
        return args

    def _caller(self, request: Request, who: Who, body_limit: int) -> Caller:
        caller = self.who(request)
        declared = request.headers.get("content-length")
        has_body = sends_body(request)
        if who != "anyone" and caller.id is None:
            raise ApiError(
                401,
                "a valid token is required (Authorization: Bearer …, from the workspace's .memstrata/token)",
                close=has_body,
            )
        if who == "admin" and not caller.admin:
            raise ApiError(403, "this needs the administrator's token (state_dir/admin.token)", close=has_body)
        if has_body and not body_limit:
            raise ApiError(413, f"{request.method} {request.url.path} takes no request body", close=True)
        if declared is not None and declared.strip().isdigit() and int(declared) > body_limit:
            raise ApiError(
                413,
                f"the request body is {int(declared):,} bytes; the limit of {request.method} {request.url.path} "
                f"is {body_limit:,}",
                close=True,
            )
        return caller

    async def _body(self, request: Request, limit: int) -> bytes:
        """The body, read only up to ``limit`` (a body sent without a length is counted as it comes)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(
                        413, f"the request body is over the limit of {request.url.path} ({limit:,} bytes)", close=True
                    )
                chunks.append(chunk)
        except ClientDisconnect:
            raise ApiError(400, "the connection closed before the request body was complete", close=True) from None
        return b"".join(chunks)
