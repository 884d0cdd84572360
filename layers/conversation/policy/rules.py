"""Who may write where, who may read what, and how long a memory lives.

Everything here is pure: the registry and the caller go in, a decision comes
out.  The store and the broker only carry these decisions out, so the rules
that keep one agent's private memory from another can be read (and tested) in
one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import TYPE_CHECKING

# The words themselves are the protocol's (protocol/vocabulary.py): the API, the CLI and the skill take them too.
from protocol.vocabulary import MEMORY_TYPES, SOURCES, TRUST_LEVELS, VISIBILITIES

if TYPE_CHECKING:  # the registry (pydantic, yaml) is the caller's to load; the policy only reads it
    from layers.conversation.policy.registry import Registry

# Lifetimes of the memory types; None = never expires.
DEFAULT_TYPE = "knowledge"
DEFAULT_RETENTION_DAYS: dict[str, int | None] = {"session": 7, "chat_summary": 30, "procedure": None, "task_log": 30}
FIXED_PERMANENT = ("preference", "knowledge", "fact", "lesson", "decision")  # never expire, not configurable


# How far a memory's writer is trusted (TRUST_LEVELS, lowest first), and where its text came from (SOURCES).
TRUST_RANK = {level: rank for rank, level in enumerate(TRUST_LEVELS)}
DEFAULT_TRUST = "medium"  # an agent's own write; also what a memory written before trust existed counts as
OPERATOR_TRUST = "high"  # the operator's (the administrator's token)
AGENT_TRUST_MAX = "medium"  # an agent may lower its own trust, never raise it
AGENT_SOURCE, INFERRED_SOURCE, OPERATOR_SOURCE = "agent_output", "inferred", "operator"


class PolicyError(ValueError):
    """A request the rules reject for its content (an unknown type, a bad date)."""


class ForbiddenError(PermissionError):
    """A request the rules reject for who is asking."""


@dataclass(frozen=True)
class Placement:
    """Where a memory goes: its visibility and (for project memories) its project."""

    visibility: str
    project_id: str | None
    inferred: bool  # True when the caller gave no visibility and the registry decided


def place(
    registry: Registry, agent: str, text: str, visibility: str | None = None, project: str | None = None
) -> Placement:
    """Decide (or check) where ``agent``'s memory may go.

    Without an explicit visibility a project keyword in the text picks that
    project when the agent is a member; otherwise the memory is private.  A
    memory is never made public by guessing.
    """
    if visibility is None and project is not None:
        visibility = "project"
    if visibility is None:
        lowered = text.lower()
        mine = registry.projects_of(agent)
        for project_id, keywords in sorted(registry.keywords().items()):
            if project_id in mine and any(k and k.lower() in lowered for k in keywords):
                return Placement("project", project_id, inferred=True)
        return Placement("private", None, inferred=True)
    if visibility not in VISIBILITIES:
        raise PolicyError(f"unknown visibility {visibility!r}: use one of {', '.join(VISIBILITIES)}")
    if visibility == "public":
        if not registry.can_write_public(agent):
            raise ForbiddenError(
                f"agent {agent!r} may not write public memories (set agents.{agent}.can_write_public "
                f"in {registry.path.name})"
            )
        return Placement("public", None, inferred=False)
    if visibility == "project":
        if not project:
            raise PolicyError("a project memory needs a project id")
        if agent not in registry.members_of(project):
            raise ForbiddenError(f"agent {agent!r} is not a member of project {project!r}")
        return Placement("project", project, inferred=False)
    return Placement("private", None, inferred=False)


def provenance(admin: bool, trust: str | None, source: str | None, infer: bool) -> tuple[str, str]:
    """A write's trust and source: given, or by the path it came (the operator's: high; an agent's: medium).

    An agent may lower its trust (low), never raise it past medium, and may not claim to be the
    operator: otherwise ``trust_min: high`` would filter nothing a careless or hostile agent wrote.
    """
    if trust is not None and trust not in TRUST_LEVELS:
        raise PolicyError(f"unknown trust {trust!r}: use one of {', '.join(TRUST_LEVELS)}")
    if source is not None and source not in SOURCES:
        raise PolicyError(f"unknown source {source!r}: use one of {', '.join(SOURCES)}")
    if admin:
        return trust or OPERATOR_TRUST, source or OPERATOR_SOURCE
    if trust is not None and TRUST_RANK[trust] > TRUST_RANK[AGENT_TRUST_MAX]:
        raise ForbiddenError(
            f"an agent's memory is trusted at most {AGENT_TRUST_MAX}: {trust} is for the operator's writes "
            "(the administrator's token, e.g. `memstrata add` run as root)"
        )
    if source == OPERATOR_SOURCE:
        raise ForbiddenError("source operator is for the operator's writes (the administrator's token)")
    return trust or DEFAULT_TRUST, source or (INFERRED_SOURCE if infer else AGENT_SOURCE)


def trust_filter(trust_min: str | None) -> dict | None:
    """The filter (mem0's dictionary form) keeping trust ``trust_min`` and above; a memory without one is medium."""
    if trust_min is None or trust_min == TRUST_LEVELS[0]:
        return None
    if trust_min not in TRUST_LEVELS:
        raise PolicyError(f"unknown trust_min {trust_min!r}: use one of {', '.join(TRUST_LEVELS)}")
    below = [level for level in TRUST_LEVELS if TRUST_RANK[level] < TRUST_RANK[trust_min]]
    if DEFAULT_TRUST in below:  # an older memory (no trust field) is medium: it must not pass
        return {"trust": {"in": [level for level in TRUST_LEVELS if level not in below]}}
    return {"NOT": [{"trust": {"in": below}}]}


@dataclass(frozen=True)
class Lifetime:
    """A memory's expiry, as mem0 wants it (a date) and as range filters want it (a number)."""

    expiration_date: str | None  # YYYY-MM-DD (UTC), the last day the memory is shown
    expires_at: float | None  # epoch seconds at the end of that day


def retention_for(memory_type: str, retention_days: Mapping[str, int | None]) -> int | None:
    if memory_type in FIXED_PERMANENT:
        return None
    return retention_days.get(memory_type, DEFAULT_RETENTION_DAYS.get(memory_type))


def lifetime(
    memory_type: str, retention_days: Mapping[str, int | None], created: datetime, expires: str | None = None
) -> Lifetime:
    """The expiry of a memory of ``memory_type`` written at ``created``; ``expires`` overrides it."""
    if memory_type not in MEMORY_TYPES:
        raise PolicyError(f"unknown memory type {memory_type!r}: use one of {', '.join(MEMORY_TYPES)}")
    if expires is not None:
        try:
            day = date.fromisoformat(expires)
        except ValueError:
            raise PolicyError("expires must be a date like 2026-12-31") from None
        today = created.astimezone(timezone.utc).date()
        if day >= date.max:  # its end (the next midnight) is past the last date there is
            raise PolicyError(f"expires must be before {date.max.isoformat()}, not {expires}")
        if day < today:
            raise PolicyError(f"expires {expires} is in the past (today is {today.isoformat()} UTC)")
    else:
        days = retention_for(memory_type, retention_days)
        if days is None:
            return Lifetime(None, None)
        day = (created.astimezone(timezone.utc) + timedelta(days=days)).date()
    # mem0 hides a memory once its date is before today (UTC): it is shown through that day.
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=timezone.utc)
    return Lifetime(day.isoformat(), end.timestamp())


@dataclass(frozen=True)
class Phase:
    """One slice of what an agent may read: public, one project set, or its own private memories."""

    name: str
    visibility: str
    owner: str | None = None  # private: only this agent's memories
    projects: tuple[str, ...] = ()  # project: only these projects

    def mem0_filters(self) -> dict:
        """The phase as mem0 search/get_all filters (mem0 insists on an agent_id key)."""
        filters: dict = {"agent_id": self.owner or "*", "visibility": self.visibility}
        if self.visibility == "project":
            filters["project_id"] = {"in": list(self.projects)}
        return filters


def read_phases(registry: Registry, agent: str) -> list[Phase]:
    """What ``agent`` may read, in the seed's order: public, its projects, its own private."""
    phases = [Phase("public", "public")]
    projects = tuple(sorted(registry.projects_of(agent)))
    if projects:
        phases.append(Phase("project", "project", projects=projects))
    phases.append(Phase("private", "private", owner=agent))
    return phases


def may_read(registry: Registry, agent: str, memory: Mapping) -> bool:
    """Whether ``agent`` may see one stored memory (for get-by-id and every result we return)."""
    visibility = memory.get("visibility")
    if visibility == "public":
        return True
    if visibility == "project":
        return memory.get("project_id") in registry.projects_of(agent)
    return visibility == "private" and memory.get("agent_id") == agent
