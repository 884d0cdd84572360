"""What a consolidation would change: duplicate clusters, conflicts, task-log groups, the refusal.

Pure: stored memories (payload and the store's own vector) go in, a plan comes out; nothing is
read from or written to a store here (layers/conversation/consolidation/nightly.py does that).

Memories are only ever compared inside one *scope*: the same owner, visibility, project, type and
mem0 ids (``user_id``, ``run_id``).  Two agents' memories are never folded together, public or
private, nor a memory into one another agent could not read, nor a 30-day task log into a
permanent fact.  Only valid memories take part: superseded, archived and expired ones are left as
they are.

Within a scope, two memories are duplicates when their texts are the same (up to case, width,
space and punctuation) or when their cosine is at least ``near_threshold`` and the guard of
layers/conversation/consolidation/sameness.py sees one fact.  Clusters are then chosen greedily: the memory
that has the most duplicates not yet taken keeps, and they fold into it; ties go to the most
words, then the newest, then the id (a rerun picks the same).  Every member is so a checked
duplicate of its keeper itself, never reached through a chain of neighbours, where A~B and B~C
could fold C into A though A and C state different facts.  The guard lets words be added on one
side only, so a keeper's duplicates each say what it says and perhaps a few words more: when
"X" has the restatements "Note: X" and "X, as before" (which are not duplicates of each other,
their added words differing) X keeps, and the words only a restatement had stay in its
superseded memory (history, ``show_superseded``), not in the valid one.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layers.conversation.consolidation import thresholds as calibration
from layers.conversation.consolidation.sameness import distinct_reason, normalised, tokens
from layers.conversation.consolidation.sameness import forget as forget_tokens
from layers.conversation.policy import validity

SCOPE_FIELDS = ("agent_id", "visibility", "project_id", "memory_type", "user_id", "run_id")
TASK_TYPE = "task_log"
SUMMARY_TYPE = "knowledge"
BLOCK = 256  # rows of the cosine matrix computed at once: a scope of n costs BLOCK x n floats
MAX_CONFLICT_GROUP = 12  # statements shown to an LLM at once; a larger group is flagged only
MAX_TASK_GROUP = 40  # task logs summarised at once; the rest of a larger group waits for the next run
TEXT_SHOWN = 200  # characters of a memory a report quotes


@dataclass(frozen=True)
class Thresholds:
    """The figures a run plans with (layers/conversation/consolidation/thresholds.py says where each comes from)."""

    near: float = calibration.NEAR_THRESHOLD
    conflict: float = calibration.CONFLICT_THRESHOLD
    task_topic: float = calibration.TASK_TOPIC_THRESHOLD
    min_task_group: int = calibration.MIN_TASK_GROUP
    max_share: float = 0.25  # of an agent's valid memories one run may invalidate

    def to_dict(self) -> dict[str, Any]:
        return {
            "near_threshold": self.near,
            "conflict_threshold": self.conflict,
            "task_topic_threshold": self.task_topic,
            "min_task_group": self.min_task_group,
            "max_share": self.max_share,
        }


@dataclass(frozen=True)
class Stored:
    """One memory as the store holds it: id, raw payload, and the vector it was stored with."""

    id: str
    payload: Mapping[str, Any]
    vector: Any  # a sequence of floats (numpy or list)

    @property
    def text(self) -> str:
        return str(self.payload.get("data") or "")


def scope_of(payload: Mapping[str, Any]) -> tuple[str | None, ...]:
    return tuple(payload.get(key) or None for key in SCOPE_FIELDS)


def is_valid(payload: Mapping[str, Any], now: float) -> bool:
    """Still in force and in use: not superseded, not archived (decayed), not past its expiry."""
    if validity.state_of(payload) != validity.VALID or payload.get(validity.SUPERSEDED_BY):
        return False
    expires_at = payload.get("expires_at")
    return not (isinstance(expires_at, int | float) and expires_at < now)


@dataclass
class Member:
    id: str
    text: str
    cosine: float  # with the cluster's keeper (1.0 for the keeper itself)
    exact: bool = False  # the same text as the keeper's, up to case, width, space and punctuation
    reason: str | None = None  # conflicts: what the guard found different from the keeper

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "cosine": round(self.cosine, 4), "text": _shown(self.text)}
        if self.exact:
            data["exact"] = True
        if self.reason:
            data["reason"] = self.reason
        return data


@dataclass
class Cluster:
    """One finding: ``fold`` (duplicates), ``conflict`` (one subject, different values), ``tasks``.

    ``superseded`` maps each memory the run invalidates to the one that replaces it (a member's id,
    or ``new`` for a summary not written yet); empty when the finding is only reported.
    """

    number: int
    kind: str  # "exact" | "near" | "conflict" | "tasks"
    scope: dict[str, str | None]
    keeper: str | None
    members: list[Member]
    action: str  # "fold" | "flag" | "resolve" | "summarise" | "report"
    superseded: dict[str, str] = field(default_factory=dict)
    note: str = ""
    summary: str | None = None  # tasks: the knowledge memory's text, once an LLM wrote it
    created: str | None = None  # tasks: the id the summary is written under

    @property
    def agent(self) -> str:
        return str(self.scope.get("agent_id") or "")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "cluster": self.number,
            "kind": self.kind,
            "scope": {k: v for k, v in self.scope.items() if v is not None},
            "keeper": self.keeper,
            "action": self.action,
            "members": [m.to_dict() for m in self.members],
        }
        if self.superseded:
            data["superseded"] = dict(self.superseded)
        if self.note:
            data["note"] = self.note
        if self.summary is not None:
            data["summary"] = self.summary
        if self.created:
            data["created"] = self.created
        return data


@dataclass
class AgentCounts:
    valid: int = 0
    folded: int = 0  # duplicates superseded by their keeper
    resolved: int = 0  # outdated statements superseded (an LLM judged the conflict)
    summarised: int = 0  # task logs superseded by a summary
    added: int = 0  # summaries written
    conflicts: int = 0  # conflict groups found (resolved or only flagged)
    task_groups: int = 0  # task-log groups found (summarised or only reported)

    @property
    def invalidated(self) -> int:
        return self.folded + self.resolved + self.summarised

    @property
    def share(self) -> float:
        return self.invalidated / self.valid if self.valid else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **vars(self),
            "invalidated": self.invalidated,
            "valid_after": self.valid - self.invalidated + self.added,
            "share": round(self.share, 4),
        }


@dataclass
class Plan:
    thresholds: Thresholds
    scanned: int = 0
    clusters: list[Cluster] = field(default_factory=list)
    agents: dict[str, AgentCounts] = field(default_factory=lambda: defaultdict(AgentCounts))

    def recount(self) -> None:
        """Per-agent figures from the clusters as they now stand (after an LLM resolved some)."""
        for counts in self.agents.values():
            counts.folded = counts.resolved = counts.summarised = counts.added = 0
            counts.conflicts = counts.task_groups = 0
        for cluster in self.clusters:
            counts = self.agents[cluster.agent]
            if cluster.kind in ("exact", "near"):
                counts.folded += len(cluster.superseded)
            elif cluster.kind == "conflict":
                counts.conflicts += 1
                counts.resolved += len(cluster.superseded)
            else:
                counts.task_groups += 1
                counts.summarised += len(cluster.superseded)
                counts.added += 1 if cluster.superseded else 0

    def refusal(self) -> str | None:
        """Why this plan must not be applied: an agent would lose more than ``max_share`` of its memories."""
        over = [
            (agent, c)
            for agent, c in sorted(self.agents.items())
            if c.invalidated and c.share > self.thresholds.max_share + 1e-12
        ]
        if not over:
            return None
        named = "; ".join(
            f"agent {agent}: {c.invalidated:,} of its {c.valid:,} valid memories ({c.share:.0%})" for agent, c in over
        )
        return (
            f"refused: this run would invalidate more than {self.thresholds.max_share:.0%} of an agent's memories "
            f"({named}); nothing was applied. Read the plan, and if it is right run again with a larger --max-share"
        )

    def superseded(self) -> dict[str, str]:
        """Every memory the plan invalidates, with what replaces it."""
        return {old: by for cluster in self.clusters for old, by in cluster.superseded.items()}


def _shown(text: str) -> str:
    return text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…"


def _unit(vectors: list[Any]) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def _neighbours(matrix: np.ndarray, floor: float) -> list[dict[int, float]]:
    """For each row, the other rows whose cosine with it is at least ``floor``."""
    found: list[dict[int, float]] = [{} for _ in range(len(matrix))]
    for start in range(0, len(matrix), BLOCK):
        sims = matrix[start : start + BLOCK] @ matrix.T
        rows, cols = np.nonzero(sims >= floor)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            if start + r != c:
                found[start + r][c] = float(sims[r, c])
    return found


def _priority(memory: Stored) -> tuple:
    """Best kept first: the most words, then the newest, then the id (so a rerun picks the same)."""
    words = sum(1 for _ in tokens(memory.text))
    newest = str(memory.payload.get("updated_at") or memory.payload.get("created_at") or "")
    return (-words, _negated(newest), memory.id)


def _negated(text: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in text)


class Planner:
    """Builds a :class:`Plan` from the memories given, one scope at a time."""

    def __init__(self, thresholds: Thresholds | None = None, now: float | None = None) -> None:
        import time

        self.thresholds = thresholds or Thresholds()
        self.now = time.time() if now is None else now
        self.plan = Plan(self.thresholds)
        self._scopes: dict[tuple[str | None, ...], list[Stored]] = defaultdict(list)
        self.payloads: dict[str, Mapping[str, Any]] = {}  # every valid memory's, as scanned

    def add(self, memories: Iterable[Stored]) -> None:
        for memory in memories:
            self.plan.scanned += 1
            if not is_valid(memory.payload, self.now) or memory.vector is None:
                continue
            self.plan.agents[str(memory.payload.get("agent_id") or "")].valid += 1
            self.payloads[memory.id] = memory.payload
            self._scopes[scope_of(memory.payload)].append(memory)

    @property
    def scope_count(self) -> int:
        return len(self._scopes)

    def build(self, progress=lambda done, total: None) -> Plan:
        scopes = sorted(self._scopes.items(), key=lambda item: tuple(str(v) for v in item[0]))
        for done, (key, members) in enumerate(scopes, 1):
            self._scope(dict(zip(SCOPE_FIELDS, key, strict=True)), members)
            progress(done, len(scopes))
        forget_tokens()  # the compared memories' tokens: not kept until the next consolidation
        self.plan.recount()
        return self.plan

    # ------------------------------------------------------------ one scope

    def _scope(self, scope: dict[str, str | None], memories: list[Stored]) -> None:
        memories = sorted(memories, key=_priority)
        if len(memories) < 2:
            return
        t = self.thresholds
        floor = min(t.near, t.conflict, t.task_topic)
        unit = _unit([m.vector for m in memories])
        near = _neighbours(unit, floor)
        keys = [normalised(m.text) for m in memories]
        same_text: dict[str, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            same_text[key].append(i)
        taken = [False] * len(memories)
        keepers: set[int] = set()
        folds = self._duplicates(memories, unit, near, keys, same_text)
        # greedy by coverage (lazily re-counted): the keeper that folds the most goes first, the
        # most words breaking a tie; every member is a checked duplicate of its keeper itself
        heap = [(-len(folds[i]), i) for i in range(len(memories)) if folds[i]]
        heapq.heapify(heap)
        while heap:
            count, i = heapq.heappop(heap)
            if taken[i]:
                continue
            live = [j for j in folds[i] if not taken[j]]
            if len(live) != -count:
                if live:
                    heapq.heappush(heap, (-len(live), i))
                continue
            found = [
                Member(memories[j].id, memories[j].text, folds[i][j], exact=keys[j] == keys[i]) for j in sorted(live)
            ]
            taken[i] = True
            keepers.add(i)
            for j in live:
                taken[j] = True
            self._cluster(
                "exact" if all(m.exact for m in found) else "near",
                scope,
                memories[i],
                found,
                "fold",
                superseded={m.id: memories[i].id for m in found},
            )
        kept = [i for i, used in enumerate(taken) if not used or i in keepers]
        if scope.get("memory_type") == TASK_TYPE:
            self._tasks(scope, memories, near, kept)  # logs of events: two of them never conflict
        else:
            self._conflicts(scope, memories, near, kept)

    def _duplicates(
        self,
        memories: list[Stored],
        unit: np.ndarray,
        near: list[dict[int, float]],
        keys: list[str],
        same_text: dict[str, list[int]],
    ) -> list[dict[int, float]]:
        """For each memory, the others that are duplicates of it (symmetric), with their cosines.

        The same text is a duplicate whatever its vector says (another embedder, another rounding);
        a near one needs ``near`` and the guard.
        """
        folds: list[dict[int, float]] = [{} for _ in memories]
        for i in range(len(memories)):
            candidates = {j: float(unit[i] @ unit[j]) for j in same_text[keys[i]] if j > i}
            candidates.update({j: c for j, c in near[i].items() if j > i and c >= self.thresholds.near})
            for j, cosine in candidates.items():
                if keys[i] == keys[j] or distinct_reason(memories[i].text, memories[j].text) is None:
                    folds[i][j] = folds[j][i] = cosine
        return folds

    def _cluster(self, kind: str, scope: dict, keeper: Stored | None, members: list[Member], action: str, **extra):
        head = [Member(keeper.id, keeper.text, 1.0)] if keeper is not None else []
        cluster = Cluster(
            len(self.plan.clusters) + 1,
            kind,
            scope,
            keeper.id if keeper else None,
            head + members,
            action,
            **extra,
        )
        self.plan.clusters.append(cluster)
        return cluster

    def _conflicts(self, scope: dict, memories: list[Stored], near: list[dict[int, float]], kept: list[int]) -> None:
        """Valid memories of one scope that state different values of one subject, grouped.

        A pair is a conflict when its cosine reaches ``conflict`` but the guard sees two facts:
        "Qdrant 部署在 6333 端口" / "…6334…".  Many such pairs are two true facts ("paging note 0",
        "paging note 1"), which only an LLM can tell: without one they are reported, never applied.
        """
        alive = set(kept)
        parent = {i: i for i in kept}

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        reasons: dict[int, str] = {}
        for i in kept:
            for j, cosine in near[i].items():
                if j <= i or j not in alive or cosine < self.thresholds.conflict:
                    continue
                reason = distinct_reason(memories[i].text, memories[j].text)
                if reason is None:
                    continue  # a duplicate this run could not fold (taken by another keeper)
                parent[root(j)] = root(i)
                reasons.setdefault(j, reason)
                reasons.setdefault(i, reason)
        groups: dict[int, list[int]] = defaultdict(list)
        for i in kept:
            if i in reasons:
                groups[root(i)].append(i)
        for members in groups.values():
            members.sort(key=lambda i: _created(memories[i]))
            head = memories[members[-1]]  # the newest statement leads the group
            others = [
                Member(memories[i].id, memories[i].text, _cosine_of(near, members[-1], i), reason=reasons.get(i))
                for i in members[:-1]
            ]
            note = "" if len(members) <= MAX_CONFLICT_GROUP else f"{len(members)} statements: too many to judge at once"
            self._cluster("conflict", scope, head, others, "flag", note=note)

    def _tasks(self, scope: dict, memories: list[Stored], near: list[dict[int, float]], kept: list[int]) -> None:
        """Task logs of one task (cosine at least ``task_topic`` with the group's first), to summarise."""
        taken: set[int] = set()
        for i in kept:
            if i in taken:
                continue
            group = [
                j
                for j, cosine in sorted(near[i].items(), key=lambda item: -item[1])
                if j in kept and j not in taken and cosine >= self.thresholds.task_topic
            ][: MAX_TASK_GROUP - 1]
            if len(group) + 1 < self.thresholds.min_task_group:
                continue
            taken.update([i, *group])
            head = memories[i]
            members = [Member(memories[j].id, memories[j].text, near[i][j]) for j in group]
            self._cluster("tasks", scope, head, members, "report")


def _created(memory: Stored) -> str:
    return str(memory.payload.get("created_at") or "")


def _cosine_of(near: list[dict[int, float]], i: int, j: int) -> float:
    return near[i].get(j, near[j].get(i, math.nan))
