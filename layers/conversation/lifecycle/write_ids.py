"""A write's identity: its ``write_id`` inside its owner's scope, and the point id derived from the two.

A write_id is the writer's idempotency key: the same write sent again (a client retry, a replay of
the durable queue) is found and not written twice.  It was global once, and that was wrong three
ways: frameworks derive write ids from a conversation and a message number, so two agents collide by
accident and the second one's text was silently not stored; a write naming another agent's write_id
was answered with that agent's memory id (a private one too); and any agent could learn whether any
write_id had ever been used.  So a write is named by ``(owner agent, write_id)`` (:data:`WriteKey`):
two agents' equal write ids are two writes, and a lookup never reaches another owner's.

The owner is the agent the memory belongs to (``NewMemory.agent_id``), which for the administrator
writing as an agent is that agent: its write ids are the agent's.

Migration: a batched write's point id was ``uuid5(WRITE_NAMESPACE, write_id)`` before write ids had
an owner (:func:`legacy_point_id`).  Such points stay where they are; a lookup also tries that id and
counts the point only when its payload names the same owner and write_id (:func:`owner_of`), so an
old write still dedupes for its owner and for nobody else.  New writes land on :func:`point_id_of`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

WriteKey = tuple[str, str]  # (the owner's agent id, the write_id)

# Point ids of batched writes before write ids had an owner: uuid5(WRITE_NAMESPACE, write_id).
WRITE_NAMESPACE = uuid.UUID("5d0c1f9e-6c3a-4d8e-9a57-2f4b8e61c0a3")
# Point ids of batched writes now: uuid5(OWNED_WRITE_NAMESPACE, "<agent>/<write_id>").  An agent id
# holds no '/' (layers/common/ids.py), so no two keys share a name.
OWNED_WRITE_NAMESPACE = uuid.UUID("b7f0e2a4-3d51-4c6e-8f2a-91d4c0e7a615")
# The payload fields a lookup reads to tell whose write a point is.
KEY_FIELDS = ["write_id", "agent_id"]


def point_id_of(agent_id: str, write_id: str) -> str:
    """The point id a batched write of ``agent_id`` gets: the same write always lands on the same point."""
    return str(uuid.uuid5(OWNED_WRITE_NAMESPACE, f"{agent_id}/{write_id}"))


def legacy_point_id(write_id: str) -> str:
    """The point id a batched write got before write ids had an owner (still looked up, for its owner only)."""
    return str(uuid.uuid5(WRITE_NAMESPACE, write_id))


def key_of(payload: Mapping[str, Any] | None) -> WriteKey | None:
    """Whose write a stored point is, from its payload; None when it names no owner or no write_id."""
    owner, write_id = (payload or {}).get("agent_id"), (payload or {}).get("write_id")
    return (owner, write_id) if isinstance(owner, str) and isinstance(write_id, str) else None


def candidate_points(keys: Iterable[WriteKey]) -> dict[str, list[WriteKey]]:
    """Each point id a lookup of ``keys`` retrieves (derived now, derived before), with the keys it may hold."""
    points: dict[str, list[WriteKey]] = {}
    for key in keys:
        points.setdefault(point_id_of(*key), []).append(key)
        points.setdefault(legacy_point_id(key[1]), []).append(key)
    return points


def owner_of(candidates: Iterable[WriteKey], payload: Mapping[str, Any] | None) -> WriteKey | None:
    """The one of ``candidates`` a retrieved point is the write of: its payload names that owner and write_id.

    A point at a legacy id another agent wrote is nobody's among the candidates (None): the id alone
    never decides, the payload does.
    """
    key = key_of(payload)
    return key if key is not None and key in set(candidates) else None
