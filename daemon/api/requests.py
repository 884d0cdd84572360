"""What each API request may hold: one schema per route, checked before anything else runs.

Every value a caller sends meets its field's type and bounds here, and a value
that does not is a 400 naming the field: before these schemas, ``expires:
"9999-12-31"`` overflowed the date arithmetic, ``expires: 1e308`` and
``write_id: {…}`` reached code that expected strings, and a 5 MB ``project``
travelled into the error message and the audit log.  A value is never echoed
from here: a message says what the field must be, and at most the kind or the
length of what came.

The body itself (size, JSON, nesting) is read by :func:`json_body`; query
parameters of the GET and DELETE routes go through the same schemas, which is
why numbers and flags also take their text forms (``limit=10``, ``dry_run=true``).
tests/failure_modes/test_no_request_value_gives_a_500.py drives every route
with values generated from these schemas.

These schemas are the one definition of the fields of an L4 add, update and
search and of an L3 search, their defaults and bounds included.  The places
that spell them out again for their own callers (the CLI's options, the
client's and the broker's signatures, the MCP tools' parameters, the skill's
stdlib copy) are each compared with them, field by field, in
tests/daemon/front/test_request_fields.py and tests/skills/test_mem0_client.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError

from daemon.shared.echo import cut
from daemon.shared.errors import InvalidRequestError
from daemon.shared.limits import ANSWER_TOKENS, L3_RESULTS, L4_PAGE, L4_RESULTS, Results, TooManyItemsError
from layers.conversation.filters import FilterError, FilterTooLargeError
from layers.conversation.filters import check as check_filter
from protocol.vocabulary import (
    AGENT_ID_PATTERN,
    DAY_PATTERN,
    ENTITY_ID_PATTERN,
    MEMORY_ID_PATTERN,
    MEMORY_TYPES,
    ROLES,
    RUN_ID_PATTERN,
    SEARCH_MODES,
    SOURCES,
    TRUST_LEVELS,
    VISIBILITIES,
    WRITE_ID_PATTERN,
)

CHOICES_OF = {
    "type": "memory type",
    "visibility": "visibility",
    "mode": "search mode",
    "role": "role",
    "trust": "trust",
    "trust_min": "trust",
    "source": "source",
}
ID_RULE = "1-64 characters from a-z, 0-9, '_' and '-', starting with a letter or digit"


def _unicode(value: str) -> str:
    """Refuse lone surrogates (``"\\ud800"`` in JSON): not text, and every encoder after this would fail on them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid Unicode text (a lone surrogate at character {exc.start:,})") from None
    return value


def _no_control(value: str) -> str:
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise ValueError("may not hold control characters")
    return value


def _absent_when_empty(value: object) -> object:
    """An empty value means "not given" (a query string sends ``layer=`` for an unset filter)."""
    return None if value == "" else value


def _json_text(value: object) -> object:
    """An object given as JSON text (a query string's ``filters={"user_id": "alice"}``) read as the object."""
    if isinstance(value, str) and value.strip():
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            raise ValueError("must be a JSON object (mem0's filter dictionary)") from None
    return value


def _or(default: object) -> BeforeValidator:
    """A value not given, empty or null is the field's default (older clients send ``"limit": null``)."""
    return BeforeValidator(lambda value: default if value is None or value == "" else value)


def _clamped(results: Results) -> AfterValidator:
    """A number of results out of range is taken as the nearest bound: asking for 500 is no error."""
    return AfterValidator(lambda value: max(results.low, min(value, results.high)))


Text = Annotated[str, AfterValidator(_unicode)]
Short = Annotated[str, StringConstraints(max_length=1024), AfterValidator(_unicode), AfterValidator(_no_control)]
Id = Annotated[str, StringConstraints(max_length=64, pattern=AGENT_ID_PATTERN)]
Day = Annotated[str, StringConstraints(max_length=10, pattern=DAY_PATTERN)]
WriteId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=WRITE_ID_PATTERN)]
MemoryId = Annotated[str, StringConstraints(max_length=64, pattern=MEMORY_ID_PATTERN)]
EntityId = Annotated[str, StringConstraints(strip_whitespace=True, max_length=128, pattern=ENTITY_ID_PATTERN)]
JsonObject = Annotated[dict[str, Any], BeforeValidator(_json_text)]  # checked further by its reader


def _mem0_filter(value: dict[str, Any]) -> dict[str, Any]:
    """A filter checked here, before the request waits for its turn: a bad one is a 400 naming its part,
    one with more conditions, clauses or values than the language takes a 413 (the broker checks again)."""
    try:
        check_filter(value)
    except FilterTooLargeError as exc:
        raise TooManyItemsError(str(exc)) from None
    return value


MemFilter = Annotated[dict[str, Any], BeforeValidator(_json_text), AfterValidator(_mem0_filter)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Share = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]  # of an agent's memories
RunId = Annotated[str, StringConstraints(max_length=32, pattern=RUN_ID_PATTERN)]
Days = Annotated[int, Field(ge=0, le=36_500)]  # a century: past that a date overflows (a 500 before)
Count = Annotated[int, Field(ge=1)]
Unset = BeforeValidator(_absent_when_empty)
# A number of results: the default when not given, the nearest bound when out of range (daemon/shared/limits.py).
TokenBudget = Annotated[int, _clamped(ANSWER_TOKENS)]  # estimated tokens of an answer (layers/textcost.py)
L3Count = Annotated[int, _or(L3_RESULTS.default), _clamped(L3_RESULTS)]
L4Count = Annotated[int, _or(L4_RESULTS.default), _clamped(L4_RESULTS)]
PageCount = Annotated[int, _or(L4_PAGE.default), _clamped(L4_PAGE)]

MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]
Trust = Literal[TRUST_LEVELS]  # type: ignore[valid-type]
Source = Literal[SOURCES]  # type: ignore[valid-type]
Visibility = Literal[VISIBILITIES]  # type: ignore[valid-type]
SearchMode = Literal[SEARCH_MODES]  # type: ignore[valid-type]
Role = Literal[ROLES]  # type: ignore[valid-type]


class Request(BaseModel):
    """Unknown fields are ignored (older and newer clients send a few more); a route that refuses them says so."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class SearchRequest(Request):
    """An L3 search of the agent's own index; the query's length is checked by the route (413)."""

    agent: Id
    q: Text
    layer: Annotated[Short | None, Unset] = None
    path: Annotated[Short | None, Unset] = None
    since: Annotated[Short | None, Unset] = None
    until: Annotated[Short | None, Unset] = None
    mode: Annotated[SearchMode, _or("auto")] = "auto"
    limit: L3Count = L3_RESULTS.default
    explain: Annotated[bool, _or(False)] = False
    threshold: Annotated[Fraction | None, Unset] = None  # the relevance scale L4's threshold uses
    min_score: Annotated[Fraction | None, Unset] = None  # least confidence (layers/local/calibration.py)
    max_tokens: Annotated[TokenBudget | None, Unset] = None  # passages first, whole sections where they fit


class MemorySearchRequest(Request):
    """An L4 search; ``fallback``: while the store is down, answer from the agent's L3 index (degraded)."""

    agent: Id
    q: Text
    limit: L4Count = L4_RESULTS.default
    fallback: Annotated[bool, _or(True)] = True
    filters: Annotated[MemFilter | None, Unset] = None  # mem0's language (layers/conversation/filters.py)
    # on the embedder's relevance scale (layers/local/vectors.py); not given: none (mem0's clients send 0.1)
    threshold: Annotated[Fraction | None, Unset] = None
    explain: Annotated[bool, _or(False)] = False
    show_expired: Annotated[bool, _or(False)] = False  # memories past their expiration_date, not yet cleaned up
    show_superseded: Annotated[bool, _or(False)] = False  # memories another one replaced (still kept)
    trust_min: Annotated[Trust | None, Unset] = None  # only memories trusted this much or more
    max_tokens: Annotated[TokenBudget | None, Unset] = None  # the best results that fit


class AddRequest(Request):
    """An L4 write; what is left out (None) the broker decides: type, placement, lifetime, infer."""

    agent: Id
    text: Text
    memory_type: Annotated[MemoryType | None, Unset] = Field(None, alias="type")
    visibility: Annotated[Visibility | None, Unset] = None
    project: Annotated[Id | None, Unset] = None
    expires: Annotated[Day | None, Unset] = None
    infer: Annotated[bool | None, Unset] = None
    write_id: Annotated[WriteId | None, Unset] = None
    role: Annotated[Role | None, Unset] = None
    # mem0's ids as data: whom or which run the memory is about, who spoke (never who writes: the token)
    user_id: Annotated[EntityId | None, Unset] = None
    run_id: Annotated[EntityId | None, Unset] = None
    actor_id: Annotated[EntityId | None, Unset] = None
    metadata: Annotated[JsonObject | None, Unset] = None  # free keys, checked by layers/conversation/metadata.py
    supersedes: Annotated[MemoryId | None, Unset] = None  # a memory the new one replaces (kept, marked superseded)
    trust: Annotated[Trust | None, Unset] = None  # default by who writes: an agent medium, the operator high
    source: Annotated[Source | None, Unset] = None  # where the text came from (stored as the memory's provenance)

    def options(self) -> dict[str, object]:
        """The write's options by field name, as the broker takes them (``Writes.add``)."""
        return self.model_dump(exclude={"agent", "text"})


class UpdateRequest(Request):
    model_config = ConfigDict(extra="forbid", frozen=True)
    agent: Id
    text: Text
    expires: Annotated[Day | None, Unset] = None


class ReindexRequest(Request):
    agent: Annotated[Id | None, Unset] = None
    rebuild: Annotated[bool | None, Unset] = None


class CleanupRequest(Request):
    execute: bool
    max_age_days: Annotated[Days | None, Unset] = None
    include_permanent: Annotated[bool | None, Unset] = None
    agent: Annotated[Id | None, Unset] = None
    visibility: Annotated[Visibility | None, Unset] = None
    project: Annotated[Id | None, Unset] = None
    memory_type: Annotated[MemoryType | None, Unset] = Field(None, alias="type")


class ConsolidateRequest(Request):
    execute: Annotated[bool | None, Unset] = None
    agent: Annotated[Id | None, Unset] = None
    max_share: Annotated[Share | None, Unset] = None
    undo: Annotated[RunId | None, Unset] = None
    force: Annotated[bool | None, Unset] = None


class BackupRequest(Request):
    keep: Annotated[Count | None, Unset] = None


class RestoreRequest(Request):
    path: Annotated[str, StringConstraints(min_length=1, max_length=4096), AfterValidator(_unicode)]


class AgentParams(Request):
    """``?agent=`` of the routes that name one memory (get, delete, history)."""

    agent: Id


class ListParams(Request):
    agent: Id
    limit: PageCount = L4_PAGE.default
    cursor: Annotated[Short | None, Unset] = None
    filters: Annotated[MemFilter | None, Unset] = None  # JSON text in a query string
    show_superseded: Annotated[bool, _or(False)] = False
    show_expired: Annotated[bool, _or(False)] = False
    show_archived: Annotated[bool, _or(False)] = False  # faded by disuse (decay): hidden, kept, restorable


class DeleteAllParams(Request):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    agent: Id
    memory_type: Annotated[MemoryType | None, Unset] = Field(None, alias="type")
    visibility: Annotated[Visibility | None, Unset] = None
    project: Annotated[Id | None, Unset] = None
    dry_run: Annotated[bool | None, Unset] = None
    user_id: Annotated[EntityId | None, Unset] = None
    run_id: Annotated[EntityId | None, Unset] = None
    actor_id: Annotated[EntityId | None, Unset] = None

    def filters(self) -> dict[str, str] | None:
        """The mem0 ids given, as the filter that narrows the agent's own memories."""
        ids = {k: getattr(self, k) for k in ("user_id", "run_id", "actor_id") if getattr(self, k)}
        return ids or None


# The schema of each route's body (POST, PUT) or query (GET, DELETE): what the hypothesis test drives.
SCHEMAS: dict[tuple[str, str], type[Request]] = {
    ("POST", "/v1/search"): SearchRequest,
    ("GET", "/v1/search"): SearchRequest,
    ("POST", "/v1/memories/search"): MemorySearchRequest,
    ("GET", "/v1/memories/search"): MemorySearchRequest,
    ("POST", "/v1/memories"): AddRequest,
    ("GET", "/v1/memories"): ListParams,
    ("DELETE", "/v1/memories"): DeleteAllParams,
    ("GET", "/v1/memories/{memory_id}"): AgentParams,
    ("DELETE", "/v1/memories/{memory_id}"): AgentParams,
    ("PUT", "/v1/memories/{memory_id}"): UpdateRequest,
    ("GET", "/v1/memories/{memory_id}/history"): AgentParams,
    ("POST", "/v1/memories/{memory_id}/restore"): AgentParams,
    ("POST", "/v1/reindex"): ReindexRequest,
    ("POST", "/v1/admin/cleanup"): CleanupRequest,
    ("POST", "/v1/admin/consolidate"): ConsolidateRequest,
    ("POST", "/v1/admin/backup"): BackupRequest,
    ("POST", "/v1/admin/restore"): RestoreRequest,
}

R = TypeVar("R", bound=Request)


def _kind(value: object) -> str:
    if isinstance(value, str):
        return f"a string of {len(value):,} characters" if len(value) > 40 else "a string"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        dict: "an object",
        list: "a list",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _problem(error: Mapping[str, Any], fields: Mapping[str, object], model: type[Request]) -> str:
    """One validation error as a sentence naming the field, never quoting the value."""
    loc = error.get("loc") or ()
    field = cut(str(loc[0]) if loc else "the request")
    given = fields.get(str(loc[0])) if loc else None
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return f"{field} is required"
    if kind == "extra_forbidden":
        taken = ", ".join(sorted(f.alias or name for name, f in model.model_fields.items()))
        return f"unknown field {field}: this request takes {taken}"
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == AGENT_ID_PATTERN:
            return f"{field} must be an id: {ID_RULE}"
        if ctx.get("pattern") == MEMORY_ID_PATTERN:
            return f"{field} must be a memory id (a UUID, as add answered it)"
        if "{4}-" in str(ctx.get("pattern")):
            return f"{field} must be a date like 2026-12-31"
        if ctx.get("pattern") == ENTITY_ID_PATTERN:
            return f"{field} must be 1-128 characters with no whitespace or control characters"
        return f"{field} must hold only the characters A-Z, a-z, 0-9, '.', '_', ':' and '-'"
    if kind == "string_too_long":
        return f"{field} is {len(given) if isinstance(given, str) else 0:,} characters; at most {ctx['max_length']:,}"
    if kind == "string_too_short":
        return f"{field} may not be empty"
    if kind == "string_type":
        return f"{field} must be a string, not {_kind(given)}"
    if kind.startswith("int_") or kind == "finite_number":
        return f"{field} must be a whole number, not {_kind(given)}"
    if kind.startswith("bool_"):
        return f"{field} must be true or false, not {_kind(given)}"
    if kind == "float_parsing" or kind == "float_type":
        return f"{field} must be a number, not {_kind(given)}"
    if kind in ("less_than_equal", "less_than"):
        return f"{field} must be at most {ctx.get('le', ctx.get('lt'))}"
    if kind in ("greater_than_equal", "greater_than"):
        return f"{field} must be at least {ctx.get('ge', ctx.get('gt'))}"
    if kind == "literal_error":
        noun = CHOICES_OF.get(field, "value")
        return f"{field}: unknown {noun}, use one of {ctx.get('expected', '')}"
    if kind == "dict_type":
        return f"{field} must be an object, not {_kind(given)}"
    if kind == "value_error" and isinstance(ctx.get("error"), FilterError):
        return str(ctx["error"])  # names its part itself ("filters.rating.gt: …")
    if kind == "value_error":
        return f"{field} {str(error['msg']).removeprefix('Value error, ')}"
    return f"{field}: {error['msg']}"


def parse(model: type[R], fields: Mapping[str, object]) -> R:
    """``fields`` as ``model``, or InvalidRequestError (400) naming the first field that is wrong."""
    try:
        return model.model_validate(dict(fields))
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        problems = [_problem(e, fields, model) for e in errors[:3]]
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise InvalidRequestError("; ".join(problems) + more) from None


def json_body(raw: bytes) -> dict:
    """A request body as a JSON object; 400 for anything else, however it is malformed."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        raise InvalidRequestError(
            "the request body nests too deeply to read (no field of a request holds nested lists or objects)"
        ) from None
    except ValueError as exc:  # not UTF-8, not JSON, a number of more than 4,300 digits
        raise InvalidRequestError(f"the request body is not JSON ({cut(str(exc))})") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    return body
