"""A memory's validity window: valid from its write until something supersedes it; archived when it decays.

Facts change ("the port is 6333" becomes "the port is 6334").  Deleting the old memory loses when it
was true and what replaced it; keeping both makes a search answer both.  So a memory carries a window:

- ``valid_from``: when its current text became true (its write; an update moves it);
- ``invalid_at`` and ``superseded_by``: set once another memory replaces it (``add(..., supersedes=ID)``,
  or a consolidation that merges several into one), the id of that memory kept as the link;
- ``state``: ``superseded`` or ``archived`` (decayed by disuse: layers/conversation/policy/decay.py), absent
  while the memory is plain valid.  It is a keyword with a payload index, so a search filters it
  inside the engine's query (``NOT state in [...]``): a hidden memory never takes one of ``top_k``'s
  places.  A memory written before these fields existed has no ``state`` and counts as valid.

The link points one way, from the replaced memory to its replacement: superseding is one payload write
on the replaced points (one engine update for any number of them), and the replacement's predecessors
are found by the indexed ``superseded_by`` field.  Only :data:`LIFECYCLE_FIELDS` may be restored by
:func:`restored_payload` (a consolidation undone): a restore can re-validate a memory, never re-own,
re-place or re-word it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STATE = "state"
SUPERSEDED = "superseded"
ARCHIVED = "archived"
VALID = "valid"  # what a view says for a memory without a state
VALID_FROM, INVALID_AT, SUPERSEDED_BY = "valid_from", "invalid_at", "superseded_by"
ARCHIVED_AT = "archived"  # when decay archived it (ISO 8601 UTC)
RESTORED_AT = "restored_at"  # when an archived memory was restored (decay counts its age from there)
HIDDEN_BY_DEFAULT = (SUPERSEDED, ARCHIVED)  # what a read leaves out unless asked
# The payload fields a lifecycle change writes, and so the only ones a restore may put back.
LIFECYCLE_FIELDS = (STATE, VALID_FROM, INVALID_AT, SUPERSEDED_BY, ARCHIVED_AT, RESTORED_AT)


def state_of(payload: Mapping[str, Any]) -> str:
    """``valid``, ``superseded`` or ``archived``."""
    state = payload.get(STATE)
    return state if state in (SUPERSEDED, ARCHIVED) else VALID


def is_valid(payload: Mapping[str, Any]) -> bool:
    """Not superseded (an archived memory is still valid: true, only unused)."""
    return payload.get(STATE) != SUPERSEDED


def hidden_states(show_superseded: bool = False, show_archived: bool = False) -> list[str]:
    """The states a read leaves out unless asked for them."""
    hidden = []
    if not show_superseded:
        hidden.append(SUPERSEDED)
    if not show_archived:
        hidden.append(ARCHIVED)
    return hidden


def state_filter(show_superseded: bool = False, show_archived: bool = False) -> dict[str, Any] | None:
    """The filter (mem0's dictionary form) that hides those states; a missing ``state`` passes it."""
    hidden = hidden_states(show_superseded, show_archived)
    return {STATE: {"in": hidden}} if hidden else None


def supersede_payload(by_id: str, at: str) -> dict[str, Any]:
    """What superseding writes on each replaced memory."""
    return {STATE: SUPERSEDED, INVALID_AT: at, SUPERSEDED_BY: by_id}


def archive_payload(at: str) -> dict[str, Any]:
    return {STATE: ARCHIVED, ARCHIVED_AT: at}


def restored_payload(payload: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` with ``fields`` put back (a None value removes the field); ValueError for any other field."""
    other = sorted(set(fields) - set(LIFECYCLE_FIELDS))
    if other:
        raise ValueError(
            f"only the lifecycle fields ({', '.join(LIFECYCLE_FIELDS)}) can be restored, not {', '.join(other)}"
        )
    out = dict(payload)
    for key, value in fields.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def window(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The validity fields of a view (``valid_from`` falls back to ``created_at`` for older memories)."""
    return {
        VALID_FROM: payload.get(VALID_FROM) or payload.get("created_at"),
        INVALID_AT: payload.get(INVALID_AT),
        SUPERSEDED_BY: payload.get(SUPERSEDED_BY),
        STATE: state_of(payload),
        ARCHIVED_AT: payload.get(ARCHIVED_AT),
        RESTORED_AT: payload.get(RESTORED_AT),
    }
