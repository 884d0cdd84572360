"""mem0's shape of a memstrata memory, defined once for the daemon's mem0 REST app and the skill's ``Memory``.

Both speak mem0 to code written against it (mem0's platform REST API, its Python ``Memory`` class): a
memory reaches them as mem0 shows one — mem0's own fields at the top, memstrata's placement, validity
and trust under ``metadata`` — and the same ``metadata`` keys of an add are read as memstrata's
placement.  Written twice, the two had drifted (the REST app left ``source`` and ``archived`` out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROCEDURAL = "procedural_memory"  # mem0's one memory_type; memstrata's is "procedure"
DEFAULT_THRESHOLD = 0.1  # mem0's search default
# The metadata keys of a mem0 add that are the memory's own fields, each with the Add field it fills.
PLACEMENT: dict[str, str] = {
    "visibility": "visibility",
    "project_id": "project",
    "memory_type": "memory_type",
    "supersedes": "supersedes",
    "trust": "trust",
    "source": "source",
}
# A memstrata memory's keys that mem0 keeps at the top of a result, and its dates (which mem0 puts last).
MEM0_FIELDS = ("id", "memory", "hash", "user_id", "agent_id", "run_id", "actor_id", "role")
MEM0_DATES = ("created_at", "updated_at", "expiration_date")
# memstrata's own keys, shown under a result's ``metadata`` (when set).
MEMSTRATA_METADATA = (
    "visibility",
    "project_id",
    "memory_type",
    "write_id",
    "phase",
    "source",
    "expires_at",
    "valid_from",
    "invalid_at",
    "superseded_by",
    "state",
    "archived",
    "access_count",
    "last_accessed",
    "importance",
    "trust",
    "provenance",
)


def memory_type_of(mem0_type: str | None) -> str | None:
    """memstrata's memory type for mem0's (``procedural_memory`` is memstrata's ``procedure``)."""
    return "procedure" if mem0_type == PROCEDURAL else mem0_type


def mem0_metadata(memory: Mapping[str, Any]) -> dict[str, Any]:
    """A result's ``metadata``: the caller's own keys as they were written, then memstrata's that are set."""
    metadata = dict(memory.get("metadata") or {})
    metadata.update({key: memory[key] for key in MEMSTRATA_METADATA if memory.get(key) is not None})
    return metadata
