"""mem0's filter language, checked, combined with the visibility rules, and translated for the engines.

A caller's filter is mem0's (mem0ai 2.2, ``Memory.search`` docstring): a flat dictionary whose keys
are AND-ed, each ``field: value`` (equality), ``field: "*"`` (any value: no condition) or ``field:
{op: operand, …}`` with ``eq ne in nin gt gte lt lte contains icontains``, and the logical keys
``AND``/``OR``/``NOT`` holding lists of such dictionaries, nested as deep as :data:`MAX_DEPTH`.

Why memstrata translates the whole filter itself instead of handing it to mem0: mem0's
``_process_metadata_filters`` merges the conditions inside ``AND`` into the top level, so a caller's
``{"AND": [{"agent_id": "b"}]}`` would overwrite the ``agent_id`` of the private phase's own filter
and read agent b's private memories.  Here the caller's filter is only ever *added* to the
visibility filter (:func:`restrict`: it becomes one more item of an ``AND``), so it can narrow what a
phase returns and never widen it.

Engines: :func:`to_edge` (a Qdrant Edge ``Filter``) and :func:`to_qdrant` (a qdrant-client
``models.Filter``, for a remote server and the old local mode) make the same tree.  Qdrant's
``MatchText`` is a word match, case-insensitive (measured on Edge 0.9: ``contains: "Movi"`` does not
match ``"Sci-Fi Movies"``, ``contains: "sci"`` does), not mem0's substring, so ``contains`` and
``icontains`` are not sent to the engine: :func:`engine_part` keeps the top-level conditions that have
none (a superset of the true answer), and :func:`matches` evaluates the whole filter on each
candidate in Python.  :func:`matches` follows the engine's semantics everywhere else (a missing field
matches no condition, ``ne``/``nin`` included; a list value matches when one of its items does),
which tests/layers/conversation/test_filters.py checks against Edge itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from layers.conversation.policy.metadata import INTERNAL, MetadataError, check_exact_numbers

LOGICAL = ("AND", "OR", "NOT")
ALIASES = {"$and": "AND", "$or": "OR", "$not": "NOT"}  # mem0's processed spelling (its own internal calls)
COMPARE = ("eq", "ne", "in", "nin")
RANGES = ("gt", "gte", "lt", "lte")
TEXT = ("contains", "icontains")
OPERATORS = (*COMPARE, *RANGES, *TEXT)
MAX_DEPTH = 8  # nested AND/OR/NOT levels
MAX_CONDITIONS = 64  # field conditions in one filter
MAX_CLAUSES = 64  # filter objects inside AND/OR/NOT lists, every level counted (empty ones too)
MAX_LIST = 256  # values of one in/nin
MAX_VALUE_CHARS = 1024
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
# ASCII digits only: ``\d`` also takes "٢٠٢٦-١٢-٣١", which the engines refuse (it was a 400 quoting Edge's parser).
_CLOCK = r"[T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:?[0-9]{2})?"
ISO_DATETIME = re.compile(rf"^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}({_CLOCK})?$")
Scalar = str | int | float | bool


class FilterError(ValueError):
    """A filter mem0's language cannot express, or one over the limits; the message names the part."""


class FilterTooLargeError(FilterError):
    """A filter with more conditions, clauses or values than :func:`check` takes (the API answers 413)."""


# ------------------------------------------------------------------ checking


def check(filters: Any) -> dict[str, Any] | None:
    """``filters`` validated and in its canonical form (``AND``/``OR``/``NOT`` spelled so); None when empty.

    FilterError names what is wrong: an unknown operator, a value of the wrong kind, too deep, too many.
    """
    if filters is None or filters == {}:
        return None
    if not isinstance(filters, Mapping):
        raise FilterError(f"filters must be an object (mem0's filter dictionary), not {type(filters).__name__}")
    try:  # one bound for every whole number in a filter, the one a memory's metadata has (metadata.py)
        check_exact_numbers(filters, "filters")
    except MetadataError as exc:
        raise FilterError(str(exc)) from None
    count = _Count()
    out = _check(filters, 1, count, "filters")
    return out or None


class _Count:
    """What one filter holds so far, against its caps (a 56 KiB body held 18,000 empty clauses)."""

    def __init__(self) -> None:
        self.conditions = 0
        self.clauses = 0

    def condition(self) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise FilterTooLargeError(
                f"filters hold more than {MAX_CONDITIONS} conditions; at most {MAX_CONDITIONS} conditions"
            )

    def clause(self, where: str, given: int) -> None:
        self.clauses += given
        if self.clauses > MAX_CLAUSES:
            raise FilterTooLargeError(
                f"{where}: filters hold more than {MAX_CLAUSES} objects inside AND/OR/NOT; "
                f"at most {MAX_CLAUSES} objects (all levels counted)"
            )


def _check(filters: Mapping, depth: int, count: _Count, where: str) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise FilterError(f"{where}: filters nest at most {MAX_DEPTH} levels of AND/OR/NOT")
    out: dict[str, Any] = {}
    for raw_key, value in filters.items():
        if not isinstance(raw_key, str):
            raise FilterError(f"{where}: keys must be field names")
        key = ALIASES.get(raw_key, raw_key)
        if key in LOGICAL:
            if key in out:
                raise FilterError(f"{where}: {key} given twice")
            if not isinstance(value, list) or not value or not all(isinstance(v, Mapping) for v in value):
                raise FilterError(f"{where}.{key} takes a non-empty list of filter objects")
            count.clause(f"{where}.{key}", len(value))
            out[key] = [_check(v, depth + 1, count, f"{where}.{key}[{i}]") for i, v in enumerate(value)]
            if key == "NOT" and any(_matches_all(sub) for sub in out[key]):
                raise FilterError(
                    f'{where}.NOT holds an object that restricts nothing (empty, or only "*"): '
                    "NOT of it matches no memory"
                )
            continue
        if not FIELD_RE.match(key):
            raise FilterError(f"{where}: {key[:64]!r} is not a field name (letters, digits, '_', '.', '-', at most 64)")
        if key.split(".", 1)[0] in INTERNAL:
            raise FilterError(f"{where}: {key!r} is memstrata's own field: no filter can name it")
        count.condition()
        out[key] = _check_condition(value, f"{where}.{key}")
    return out


def _matches_all(checked: Mapping[str, Any]) -> bool:
    """Whether a checked filter object restricts nothing, as the engines read it (:func:`_translate` drops it).

    Inside NOT such an object would mean "no memory" in Python and vanish on the engines (``{"NOT":
    [{}]}`` matched everything there): :func:`check` refuses it instead.
    """
    for key, value in checked.items():
        if key == "AND" and all(_matches_all(sub) for sub in value):
            continue
        if key == "OR" and any(_matches_all(sub) for sub in value):
            continue
        if key not in LOGICAL and value == "*":
            continue
        return False
    return True


def _scalar(value: Any, where: str) -> Scalar:
    """A value to match exactly: what both engines match by value (a string, a whole number, true/false).

    A fraction was handed to the engine and came back as its TypeError; a whole number past 64 bits too.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):  # within ±(2^53 − 1): check() refused any other first
        return value
    if isinstance(value, float):
        raise FilterError(
            f"{where}: a number with a fraction cannot be matched exactly (the engines match strings, whole "
            "numbers and true/false): compare it with gte and lte"
        )
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            raise FilterError(f"{where}: a value holds at most {MAX_VALUE_CHARS} characters")
        return value
    raise FilterError(f"{where}: a value must be a string, a number or true/false, not {type(value).__name__}")


def _bound(value: Any, where: str) -> float | str:
    """A range bound: a finite number (compared as a double, so a whole number within 2^53) or an ISO date.

    Before, a 401-digit integer overflowed float() (a 500), NaN or Infinity (JSON extensions Python
    reads) were handed on to match nothing, and a date the engine's parser refuses ("2026-02-30",
    Arabic-Indic digits) came back as its error.  A date is handed on in the one form every engine
    reads, its own offset kept (a naive one is UTC, as :func:`matches` reads it).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise FilterError(f"{where}: range bounds must be numbers or ISO dates")
    if isinstance(value, str):
        moment = _as_time(value)
        if moment is None:
            raise FilterError(f"{where}: range bounds must be numbers or ISO dates like 2026-12-31")
        return moment.isoformat()  # written out in full: Edge refuses an offset after minutes ("T10:00+05:30")
    if not math.isfinite(value):
        raise FilterError(f"{where}: a range bound must be a finite number")
    return float(value)


def _check_condition(value: Any, where: str) -> Any:
    if value == "*":
        return "*"
    if isinstance(value, list):
        return {"in": _values(value, where)}
    if not isinstance(value, Mapping):
        return _scalar(value, where)
    if not value:
        raise FilterError(f"{where}: an empty operator object")
    ops: dict[str, Any] = {}
    for op, operand in value.items():
        if op not in OPERATORS:
            hint = " (mem0 spells them without '$')" if isinstance(op, str) and op.startswith("$") else ""
            raise FilterError(f"{where}: unknown operator {str(op)[:32]!r}{hint}; use one of {', '.join(OPERATORS)}")
        if op in ("in", "nin"):
            ops[op] = _values(operand, f"{where}.{op}")
        elif op in RANGES:
            ops[op] = _bound(operand, f"{where}.{op}")
        elif op in TEXT:
            if not isinstance(operand, str) or not operand:
                raise FilterError(f"{where}.{op} takes a non-empty string")
            ops[op] = _scalar(operand, f"{where}.{op}")
        else:
            ops[op] = _scalar(operand, f"{where}.{op}")
            if op == "ne" and not (isinstance(operand, str) or _whole(operand)):
                raise FilterError(f"{where}.ne takes a string or a whole number (for true/false: eq the other one)")
    bounds = [v for op, v in ops.items() if op in RANGES]
    if len({type(b) for b in bounds}) > 1:
        raise FilterError(f"{where}: range bounds must be all numbers or all dates")
    return ops


def _values(value: Any, where: str) -> list[Scalar]:
    """The values of an ``in``/``nin`` (or of a list given as a value): all strings or all whole numbers,
    the two kinds of list both engines match (Edge refused a mixed one with a TypeError)."""
    if not isinstance(value, list) or not value:
        raise FilterError(f"{where}: takes a non-empty list of values")
    if len(value) > MAX_LIST:
        raise FilterTooLargeError(f"{where}: holds {len(value):,} values; at most {MAX_LIST} values")
    values = [_scalar(v, where) for v in value]
    if not (all(isinstance(v, str) for v in values) or all(_whole(v) for v in values)):
        raise FilterError(f"{where}: a list of values is all strings or all whole numbers (not true/false)")
    return values


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------ combining


def restrict(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` (a visibility phase's filter) AND ``extra`` (the caller's): never wider than ``base``.

    ``extra`` becomes one more item of ``base``'s ``AND`` list, so none of its keys can replace one of
    ``base``'s.
    """
    combined = dict(base)
    if extra:
        combined["AND"] = [*combined.get("AND", []), dict(extra)]
    return combined


def has_text_match(filters: Mapping[str, Any] | None) -> bool:
    """Whether ``contains``/``icontains`` appear anywhere (then :func:`matches` must check each candidate)."""
    if not filters:
        return False
    for key, value in filters.items():
        if ALIASES.get(key, key) in LOGICAL:
            if any(has_text_match(sub) for sub in value):
                return True
        elif isinstance(value, Mapping) and any(op in value for op in TEXT):
            return True
    return False


def engine_part(filters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What an engine can apply: every top-level condition without a substring match anywhere in it.

    A superset of the true answer (each kept part is one of the AND-ed parts); :func:`matches` then
    checks the whole filter.  Without ``contains``/``icontains`` this is ``filters`` itself.
    """
    if not filters:
        return None
    kept: dict[str, Any] = {}
    for key, value in filters.items():
        logical = ALIASES.get(key, key)
        if logical == "AND":
            parts = [p for p in (engine_part(sub) for sub in value) if p]
            if parts:
                kept["AND"] = parts
        elif logical in LOGICAL:
            if not any(has_text_match(sub) for sub in value):
                kept[logical] = value
        elif not (isinstance(value, Mapping) and any(op in value for op in TEXT)):
            kept[key] = value
    return kept or None


# ------------------------------------------------------------------ evaluating in Python


def matches(payload: Mapping[str, Any], filters: Mapping[str, Any] | None) -> bool:
    """Whether a stored payload satisfies ``filters``, with the engine's semantics (see the module's doc)."""
    if not filters:
        return True
    for key, value in filters.items():
        logical = ALIASES.get(key, key)
        if logical == "AND":
            if not all(matches(payload, sub) for sub in value):
                return False
        elif logical == "OR":
            if not any(matches(payload, sub) for sub in value):
                return False
        elif logical == "NOT":
            if any(matches(payload, sub) for sub in value):
                return False
        elif not _field_matches(_lookup(payload, key), value):
            return False
    return True


_MISSING = object()


def _lookup(payload: Mapping[str, Any], key: str) -> Any:
    value: Any = payload
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _field_matches(value: Any, condition: Any) -> bool:
    if condition == "*":
        return True
    if value is _MISSING or value is None:
        return False
    items = _items(value)
    if not isinstance(condition, Mapping):
        return any(_same(item, condition) for item in items)
    for op, operand in condition.items():
        if op == "eq" and not any(_same(i, operand) for i in items):
            return False
        if op == "ne" and any(_same(i, operand) for i in items):
            return False
        if op == "in" and not any(_same(i, o) for i in items for o in operand):
            return False
        if op == "nin" and any(_same(i, o) for i in items for o in operand):
            return False
        if op in RANGES and not any(_in_range(i, op, operand) for i in items):
            return False
        if op == "contains" and not any(isinstance(i, str) and operand in i for i in items):
            return False
        if op == "icontains" and not any(isinstance(i, str) and operand.casefold() in i.casefold() for i in items):
            return False
    return True


def _as_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not ISO_DATETIME.match(value):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _in_range(value: Any, op: str, bound: Any) -> bool:
    if isinstance(bound, str):
        moment, limit = _as_time(value), _as_time(bound)
        if moment is None or limit is None:
            return False
        return _compare(moment, op, limit)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return _compare(float(value), op, float(bound))


def _compare(left: Any, op: str, right: Any) -> bool:
    return {"gt": left > right, "gte": left >= right, "lt": left < right, "lte": left <= right}[op]


# ------------------------------------------------------------------ engines


def to_edge(filters: Mapping[str, Any] | None) -> Any:
    """``filters`` as a Qdrant Edge ``Filter`` (None when nothing restricts)."""
    import qdrant_edge as qe

    return _translate(filters, _EdgeModels(qe))


def to_qdrant(filters: Mapping[str, Any] | None) -> Any:
    """``filters`` as a qdrant-client ``models.Filter`` (None when nothing restricts)."""
    from qdrant_client import models

    return _translate(filters, _ClientModels(models))


class _EdgeModels:
    def __init__(self, qe: Any) -> None:
        self.qe = qe

    def match(self, key: str, value: Any) -> Any:
        return self.qe.FieldCondition(key=key, match=self.qe.MatchValue(value))

    def any(self, key: str, values: list) -> Any:
        return self.qe.FieldCondition(key=key, match=self.qe.MatchAny(list(values)))

    def except_(self, key: str, values: list) -> Any:
        return self.qe.FieldCondition(key=key, match=self.qe.MatchExcept(list(values)))

    def range(self, key: str, bounds: dict) -> Any:
        if all(isinstance(v, str) for v in bounds.values()):
            return self.qe.FieldCondition(key=key, range=self.qe.RangeDateTime(**bounds))
        return self.qe.FieldCondition(key=key, range=self.qe.RangeFloat(**{k: float(v) for k, v in bounds.items()}))

    def filter(self, must: list, should: list, must_not: list) -> Any:
        return self.qe.Filter(must=must or None, should=should or None, must_not=must_not or None)


class _ClientModels:
    def __init__(self, models: Any) -> None:
        self.m = models

    def match(self, key: str, value: Any) -> Any:
        return self.m.FieldCondition(key=key, match=self.m.MatchValue(value=value))

    def any(self, key: str, values: list) -> Any:
        return self.m.FieldCondition(key=key, match=self.m.MatchAny(any=list(values)))

    def except_(self, key: str, values: list) -> Any:
        return self.m.FieldCondition(key=key, match=self.m.MatchExcept(**{"except": list(values)}))

    def range(self, key: str, bounds: dict) -> Any:
        if all(isinstance(v, str) for v in bounds.values()):
            return self.m.FieldCondition(key=key, range=self.m.DatetimeRange(**bounds))
        return self.m.FieldCondition(key=key, range=self.m.Range(**{k: float(v) for k, v in bounds.items()}))

    def filter(self, must: list, should: list, must_not: list) -> Any:
        return self.m.Filter(must=must or None, should=should or None, must_not=must_not or None)


def _translate(filters: Mapping[str, Any] | None, build: Any) -> Any:
    """The tree: top-level keys in ``must``, ``OR`` in ``should`` (one must hold), ``NOT`` in ``must_not``.

    ``contains``/``icontains`` are refused here (see the module's doc: :func:`engine_part` removes them).
    """
    if not filters:
        return None
    must: list = []
    should: list = []
    must_not: list = []
    seen: set[str] = set()
    for key, value in filters.items():
        logical = ALIASES.get(key, key)
        if logical in LOGICAL:
            if logical in seen:
                continue  # mem0 may carry both spellings of one clause
            seen.add(logical)
            if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
                raise FilterError(f"{logical} takes a list of filter dictionaries, not {value!r}")
            parts = [_translate(sub, build) for sub in value]
            if logical == "OR":
                if any(p is None for p in parts):  # one branch matches everything: so does the OR
                    continue
                # a should list of one filter each: Qdrant's should holds when at least one holds
                must.append(build.filter([], parts, []))
            else:
                target = must if logical == "AND" else must_not
                target.extend(p for p in parts if p is not None)
            continue
        must.extend(_conditions(key, value, build))
    if not (must or should or must_not):
        return None
    return build.filter(must, should, must_not)


def _conditions(key: str, value: Any, build: Any) -> list:
    if value == "*":
        return []  # any value (mem0's wildcard; mem0 insists on an agent_id key and "*" means no restriction)
    if isinstance(value, list):
        return [build.any(key, value)]
    if not isinstance(value, Mapping):
        return [build.match(key, value)]
    out = []
    bounds = {op: value[op] for op in RANGES if op in value}
    for op, operand in value.items():
        if op == "eq":
            out.append(build.match(key, operand))
        elif op == "ne":
            out.append(build.except_(key, [operand]))
        elif op == "in":
            out.append(build.any(key, operand))
        elif op == "nin":
            out.append(build.except_(key, operand))
        elif op in TEXT:
            raise FilterError(f"filter on {key!r}: {op} is evaluated by filters.matches, not by the engine")
        elif op not in RANGES:
            raise FilterError(f"filter on {key!r}: unsupported operator {op!r}")
    if bounds:
        if not all(isinstance(v, str) and ISO_DATETIME.match(v) for v in bounds.values()):
            try:
                bounds = {k: float(v) for k, v in bounds.items()}
            except (TypeError, ValueError):
                raise FilterError(f"filter on {key!r}: range bounds must be numbers or ISO dates") from None
        out.append(build.range(key, bounds))
    return out
