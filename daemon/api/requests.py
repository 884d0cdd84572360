"""What each API request may hold: one schema per route, derived from its operation, checked before anything else runs.

Every value a caller sends meets its field's type and bounds here, and a value
that does not is a 400 naming the field: before these schemas, ``expires:
"9999-12-31"`` overflowed the date arithmetic, ``expires: 1e308`` and
``write_id: {…}`` reached code that expected strings, and a 5 MB ``project``
travelled into the error message and the audit log.  A value is never echoed
from here: a message says what the field must be, and at most the kind or the
length of what came.

The fields themselves (names, wire names, defaults, choices, bounds, patterns) are
the protocol's: each route's schema is built by :func:`derived` from
``protocol.fields.describe(operation)`` (protocol/operations.py), so an
operation's field is written once.  What stays here is the HTTP side:

- the body itself (size, JSON, nesting) is read by :func:`json_body`; free text
  must be valid Unicode (no lone surrogates), and an optional free-text field (a
  filter, a cursor) one line (no control characters); a number is finite;
- "empty means unset": a query string sends ``layer=`` for an unset filter, and
  older clients send ``"limit": null`` for the default; query parameters of the
  GET and DELETE routes go through the same schemas, which is why numbers and
  flags also take their text forms (``limit=10``, ``dry_run=true``), and an
  object its JSON text (``filters={"user_id": "alice"}``);
- a count out of range is taken as the nearest bound (``results``), mem0's ids
  are read stripped, and mem0's filters are checked with the L4 layer's reader;
- which routes refuse unknown fields, and the wording of every refusal (:func:`_problem`).

tests/failure_modes/test_no_request_value_gives_a_500.py drives every route
with values generated from these schemas; tests/daemon/api/test_request_schemas.py
checks each schema against its operation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Optional, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    create_model,
)

from daemon.common.daemon_limits import Results, TooManyItemsError
from daemon.common.domain_errors import InvalidRequestError
from daemon.common.echo import cut
from layers.conversation.policy.filters import FilterError, FilterTooLargeError
from layers.conversation.policy.filters import check as check_filter
from protocol import operations as op
from protocol.fields import Field as OperationField
from protocol.fields import describe
from protocol.vocabulary import AGENT_ID_PATTERN, ENTITY_ID_PATTERN, MEMORY_ID_PATTERN, TRUST_LEVELS

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


def _mem0_filter(value: dict[str, Any]) -> dict[str, Any]:
    """A filter checked here, before the request waits for its turn: a bad one is a 400 naming its part,
    one with more conditions, clauses or values than the language takes a 413 (the broker checks again)."""
    try:
        check_filter(value)
    except FilterTooLargeError as exc:
        raise TooManyItemsError(str(exc)) from None
    return value


Unset = BeforeValidator(_absent_when_empty)
JsonObject = Annotated[dict[str, Any], BeforeValidator(_json_text)]  # checked further by its reader
MemFilter = Annotated[dict[str, Any], BeforeValidator(_json_text), AfterValidator(_mem0_filter)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Trust = Literal[TRUST_LEVELS]  # type: ignore[valid-type]


# ---------------------------------------------------------------- a field of an operation as pydantic takes it


def _text(item: OperationField) -> Any:
    """A text field: one of its choices, or its length and pattern; free text (no pattern) valid Unicode,
    and an optional one (a filter, a glob, a cursor: never prose) one line."""
    if item.choices is not None:
        return Literal[item.choices]
    parts: list[object] = []
    if item.min_length is not None or item.max_length is not None or item.pattern is not None:
        stripped = item.pattern == ENTITY_ID_PATTERN or None  # mem0's ids: " alice " is alice
        parts.append(
            StringConstraints(
                strip_whitespace=stripped,
                min_length=item.min_length,
                max_length=item.max_length,
                pattern=item.pattern,
            )
        )
    if item.pattern is None:
        parts.append(AfterValidator(_unicode))
        if not item.required:
            parts.append(AfterValidator(_no_control))
    annotated: Any = Annotated
    key = (str, *parts)
    return annotated[key] if parts else str


def _number(item: OperationField) -> Any:
    """A number within its bounds (finite: JSON text may say NaN); a count of results clamped to them."""
    if item.results is not None:
        return Annotated[int, _clamped(item.results)]
    bounds: dict[str, Any] = {}
    if item.low is not None:
        bounds["gt" if item.low_exclusive else "ge"] = item.low
    if item.high is not None:
        bounds["le"] = item.high
    if item.kind is float:
        bounds["allow_inf_nan"] = False
    return Annotated[item.kind, Field(**bounds)] if bounds else item.kind


def _object(item: OperationField) -> Any:
    """A JSON object (or its text in a query string); mem0's filters checked by the L4 layer's reader."""
    return MemFilter if item.name == "filters" else JsonObject


_KINDS = {str: _text, int: _number, float: _number, bool: lambda item: bool, dict: _object}


def pydantic_field(item: OperationField) -> tuple[Any, Any]:
    """``(annotation, FieldInfo)`` of one operation field: a required one as it comes, an optional one
    unset when empty or null, one with a default that default when empty or null."""
    kind = _KINDS[item.kind](item)
    alias = item.wire if item.wire != item.name else None
    if item.required:
        return kind, Field(..., alias=alias)
    if item.default is None:
        return Annotated[Optional[kind], Unset], Field(None, alias=alias)  # noqa: UP045 - a value, not a hint
    return Annotated[kind, _or(item.default)], Field(item.default, alias=alias)


# ---------------------------------------------------------------- the schemas

Op = TypeVar("Op", bound=op.Operation)


class Request(BaseModel):
    """Unknown fields are ignored (older and newer clients send a few more); a route that refuses them says so."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)
    OPERATION: ClassVar[type[op.Operation]]  # what the schema is derived from

    def get(self, name: str) -> Any:
        """One field by its Python name, before the operation is built (a route checks who asks first)."""
        return self.__dict__[name]

    def to(self, operation: type[Op], **path: str) -> Op:
        """The operation these fields make; ``path``: the fields the route's path holds (a memory id)."""
        if operation is not self.OPERATION:
            raise TypeError(f"{type(self).__name__} holds an {self.OPERATION.__name__}, not an {operation.__name__}")
        return operation(**self.model_dump(), **path)


def derived(operation: type[op.Operation], name: str, *, forbid: bool = False, by_name: bool = True) -> type[Request]:
    """The schema of ``operation``'s body or query: its fields (not the path's), by their wire names.

    ``forbid``: an unknown field is refused (400 naming the fields taken) rather than ignored.
    ``by_name``: a field whose wire name differs (``type``) is also taken by its Python name (``memory_type``).
    """

    config = ConfigDict(extra="forbid" if forbid else "ignore", frozen=True, populate_by_name=True)
    if not by_name:
        config = ConfigDict(extra="forbid" if forbid else "ignore", frozen=True, populate_by_name=False)

    class Base(Request):
        model_config = config
        OPERATION = operation

    fields = {item.name: pydantic_field(item) for item in describe(operation) if item.where != "path"}
    build: Any = create_model  # its overloads do not take fields built at run time
    model: type[Request] = build(name, __base__=Base, __module__=__name__, __doc__=operation.__doc__, **fields)
    return model


SearchRequest = derived(op.Search, "SearchRequest", by_name=False)  # ``q`` only, never ``query``
MemorySearchRequest = derived(op.MemorySearch, "MemorySearchRequest", by_name=False)
AddRequest = derived(op.Add, "AddRequest")
UpdateRequest = derived(op.Update, "UpdateRequest", forbid=True)
ReindexRequest = derived(op.Reindex, "ReindexRequest")
CleanupRequest = derived(op.Cleanup, "CleanupRequest")
ConsolidateRequest = derived(op.Consolidate, "ConsolidateRequest")
BackupRequest = derived(op.Backup, "BackupRequest")
RestoreRequest = derived(op.Restore, "RestoreRequest")
ListParams = derived(op.List, "ListParams")
DeleteAllParams = derived(op.DeleteAll, "DeleteAllParams", forbid=True)
# ``?agent=`` of the routes that name one memory (its id is in the path)
GetParams = derived(op.Get, "GetParams")
DeleteParams = derived(op.Delete, "DeleteParams")
HistoryParams = derived(op.History, "HistoryParams")
RestoreMemoryParams = derived(op.RestoreMemory, "RestoreMemoryParams")

WriteId = _text(next(f for f in describe(op.Add) if f.name == "write_id"))  # a write's idempotency key

# The schema of each route's body (POST, PUT) or query (GET, DELETE): what the hypothesis test drives.
SCHEMAS: dict[tuple[str, str], type[Request]] = {
    ("POST", "/v1/search"): SearchRequest,
    ("GET", "/v1/search"): SearchRequest,
    ("POST", "/v1/memories/search"): MemorySearchRequest,
    ("GET", "/v1/memories/search"): MemorySearchRequest,
    ("POST", "/v1/memories"): AddRequest,
    ("GET", "/v1/memories"): ListParams,
    ("DELETE", "/v1/memories"): DeleteAllParams,
    ("GET", "/v1/memories/{memory_id}"): GetParams,
    ("DELETE", "/v1/memories/{memory_id}"): DeleteParams,
    ("PUT", "/v1/memories/{memory_id}"): UpdateRequest,
    ("GET", "/v1/memories/{memory_id}/history"): HistoryParams,
    ("POST", "/v1/memories/{memory_id}/restore"): RestoreMemoryParams,
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
