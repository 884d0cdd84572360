"""What a memory carries besides its text: mem0's ids as data, and the caller's own metadata.

In mem0 ``user_id``, ``run_id`` and ``actor_id`` say whom or which run a memory is about (the end
user an agent serves, a conversation, the speaker of a message); they are stored with the memory,
filtered on and returned.  memstrata keeps them the same way, as data: who *asks* is decided by the
token, never by these values, and what a caller may read stays decided by visibility
(layers/conversation/policy/rules.py).

Custom metadata is kept as mem0 keeps it: free keys with JSON values, stored next to the memory's
own fields (so mem0's flat filters reach them: ``{"category": "movies"}``).  The keys memstrata or
mem0 use for a memory's own fields are reserved (:data:`RESERVED`): a caller's metadata cannot
re-place, re-own or re-date a memory through them.  A size cap keeps one memory's metadata small
(:data:`MAX_METADATA_BYTES` of compact JSON); :func:`strings` yields every string in it for the
caller's secret guard.

Numbers are kept exactly or refused, never rounded: a whole number past ±(2^53 − 1)
(:data:`MAX_EXACT_INTEGER`) is refused naming its key, because past that a JSON number is a double to
most readers (JavaScript, the mem0 platform's clients), a range filter compares payload numbers as
doubles, and the embedded engine stores one past 64 bits as a double: 2^53 + 1 would come back, or
match, as 2^53.  Such a value goes as a string.  The same bound holds for the numbers of a filter
(:func:`check_exact_numbers`), so a filter never asks for a value no memory can hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from protocol.vocabulary import ENTITY_ID_PATTERN

ENTITY_IDS = ("user_id", "run_id", "actor_id")
# Fields only memstrata reads and no caller may set or filter on: a spoke's replica keeps the hub's word on
# which of its agents may read a memory in ``hub_readers`` (daemon/conversation/hub_replica.py).  A filter
# naming it would tell an agent who else may read what it reads (whether another agent is in a project).
INTERNAL = frozenset({"hub_readers"})
# Payload fields of a stored memory: mem0's (data, hash, dates, ids, role, lemmatized text) and memstrata's.
RESERVED = frozenset(
    {
        "data",
        "memory",
        "hash",
        "created_at",
        "updated_at",
        "id",
        "score",
        "text_lemmatized",
        "attributed_to",
        "agent_id",
        *ENTITY_IDS,
        "role",
        "visibility",
        "project_id",
        "memory_type",
        "expiration_date",
        "expires_at",
        "write_id",
        "phase",
        "source",
        "degraded",
        "metadata",
        "invalid_at",
        "superseded_by",
        "valid_from",
        "archived",
        "state",
        "restored_at",
        "supersedes",
        "access_count",
        "last_accessed",
        "importance",
        "trust",
        "provenance",
        *INTERNAL,
    }
)
MAX_METADATA_BYTES = 4096
MAX_EXACT_INTEGER = 2**53 - 1  # the largest whole number every JSON reader and the store keep exactly
MAX_METADATA_KEYS = 32
MAX_DEPTH = 4
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
ENTITY_RE = re.compile(ENTITY_ID_PATTERN)  # mem0's ids as data (protocol/vocabulary.py)


class MetadataError(ValueError):
    """Metadata or an id memstrata will not store as given; the message names the key."""


def check_entity_id(value: object, name: str) -> str | None:
    """An id as mem0 takes it (a number becomes text, spaces around are trimmed) and as memstrata stores it.

    mem0 refuses empty ids and ids with whitespace inside; memstrata also caps them at 128 characters.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise MetadataError(f"{name} must be a string (or a whole number), not {type(value).__name__}")
    text = str(value).strip()
    if not ENTITY_RE.match(text):
        raise MetadataError(f"{name} must be 1-128 characters with no whitespace or control characters")
    return text


def check_metadata(metadata: object) -> dict[str, Any]:
    """The caller's metadata, checked: an object of free keys with JSON values, none reserved, small."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise MetadataError(f"metadata must be an object, not {type(metadata).__name__}")
    if len(metadata) > MAX_METADATA_KEYS:
        raise MetadataError(f"metadata holds at most {MAX_METADATA_KEYS} keys, not {len(metadata)}")
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not KEY_RE.match(key):
            shown = key[:64] if isinstance(key, str) else type(key).__name__
            raise MetadataError(
                f"metadata key {shown!r}: letters, digits, '_' and '-', at most 64, not starting with a digit"
            )
        if key in RESERVED:
            raise MetadataError(
                f"metadata key {key!r} is reserved: it is one of the memory's own fields (pass user_id, run_id, "
                "actor_id, visibility, project_id, memory_type and expiration_date as their own arguments)"
            )
        _check_value(value, f"metadata.{key}", 1)
        out[key] = value
    size = len(json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise MetadataError(f"metadata is {size:,} bytes as JSON; a memory keeps at most {MAX_METADATA_BYTES:,}")
    return out


def inexact_integer(value: object) -> bool:
    """A whole number (not a boolean) past ±(2^53 − 1): one that would not be kept exactly."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INTEGER


def _not_exact(where: str) -> MetadataError:
    """The refusal of such a number, naming where it is and never quoting it."""
    return MetadataError(
        f"{where}: a whole number past ±{MAX_EXACT_INTEGER:,} (2^53 − 1) would not be kept exactly (JSON "
        "readers and range filters take numbers as doubles): send it as a string"
    )


def check_exact_numbers(value: object, where: str) -> None:
    """Refuse any whole number past ±(2^53 − 1) anywhere in ``value`` (a filter: its keys name the place).

    Iterative, so a value nested as deeply as a JSON body may be is walked without a RecursionError.
    """
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:
        item, place = stack.pop()
        if inexact_integer(item):
            raise _not_exact(place)
        if isinstance(item, Mapping):
            stack += [(v, f"{place}.{str(k)[:64]}") for k, v in item.items()]
        elif isinstance(item, list | tuple):
            stack += [(v, f"{place}[{i}]") for i, v in enumerate(item)]


def _check_value(value: Any, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise MetadataError(f"{where}: metadata values nest at most {MAX_DEPTH} levels")
    if inexact_integer(value):
        raise _not_exact(where)
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise MetadataError(f"{where}: not a finite number (JSON has no NaN or infinity)")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_value(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise MetadataError(f"{where}: keys must be strings")
            _check_value(item, f"{where}.{k}", depth + 1)
        return
    raise MetadataError(f"{where}: {type(value).__name__} is not a JSON value")


def strings(metadata: Mapping[str, Any]) -> Iterator[str]:
    """Every key and string value in ``metadata``, nested ones too (what the secret guard must see)."""
    for key, value in metadata.items():
        yield str(key)
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            yield from strings(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, str):
                    yield item
                elif isinstance(item, Mapping | list):
                    yield from strings({"": item} if isinstance(item, list) else item)


def custom_of(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's metadata of a stored payload: every key that is not one of the memory's own fields."""
    return {k: v for k, v in payload.items() if k not in RESERVED}
