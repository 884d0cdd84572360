"""Nightly consolidation of L4: plan, check, apply as one batch, and undo.

A run scans every memory (with the vector the store holds), plans (consolidation_plan.py), asks
the LLM when one is configured (judge.py), and writes its report before it changes anything:
what it found, what it would do, per-agent figures.  A run that would invalidate more than
``max_share`` of any agent's valid memories is refused whole.  Applying is one exclusive call on
the store (the daemon runs it as one job on its store thread, so no agent's write comes between
its parts): the payloads of every memory it touches are read again, anything changed since the
scan is left out, those payloads are written into the report (``before``), and only then are the
summaries added and the memories superseded; the payloads after are read back (``after``).  A
crash between the two leaves a report in state ``applying`` that undo handles as well as an
applied one.

Undo puts back each touched memory's lifecycle fields (``state``, ``invalid_at``,
``superseded_by``, the validity window: all a run ever changes on a memory) as ``before`` holds
them, and deletes the memories the run added, after checking that nothing changed them since the
run; then every payload is again exactly what ``before`` holds (use counts aside: the daemon adds
hits in the background, and a search of the restored memories may count one).  ``force`` puts the validity back
over later changes too, keeping those changes (a later edit's text stays).  Vectors are never
touched by a run, so payloads are the whole state.

Nothing here knows where reports are kept or who may run this; the daemon decides both.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Protocol, TypeVar

from layers.conversation.adapters.store import NewMemory
from layers.conversation.consolidation.judge import JudgeError, LlmJudge, Statement
from layers.conversation.consolidation.plan import (
    MAX_CONFLICT_GROUP,
    SUMMARY_TYPE,
    Cluster,
    Plan,
    Planner,
    Stored,
    Thresholds,
    is_valid,
)
from layers.conversation.consolidation.sameness import GUARD_VERSION
from layers.conversation.lifecycle.write_ids import point_id_of
from layers.conversation.policy import validity
from layers.conversation.policy.decay import ACCESS_COUNT, LAST_ACCESSED
from layers.conversation.policy.rules import DEFAULT_TRUST, INFERRED_SOURCE, TRUST_RANK

T = TypeVar("T")
PAGE = 256
REPORT_VERSION = 1

Progress = Callable[[str, int, int], None]


class UndoRefused(RuntimeError):
    """Undo would overwrite changes made since the run, or there is nothing to undo (the message says)."""


class BatchStore(Protocol):
    """What applying and undoing need; every call inside one :meth:`ConsolidationStore.exclusive`."""

    def payloads(self, ids: Sequence[str]) -> dict[str, dict]: ...

    def supersede(self, old_ids: Sequence[str], by_id: str, at: str) -> None: ...

    def restore_validity(self, payloads: Mapping[str, Mapping]) -> None: ...

    def add_memories(self, memories: Sequence[NewMemory]) -> list[str]: ...

    def delete_ids(self, ids: Sequence[str]) -> None: ...


class ConsolidationStore(Protocol):
    def count(self) -> int: ...

    def scan_points(self, limit: int, cursor: str | None, agent: str | None) -> tuple[list[Stored], str | None]: ...

    def exclusive(self, fn: Callable[[BatchStore], T]) -> T: ...


def iso_now(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).isoformat(timespec="seconds")


def _no_progress(phase: str, done: int, total: int) -> None:
    pass


def consolidate(
    store: ConsolidationStore,
    *,
    execute: bool,
    run_id: str,
    save: Callable[[dict], None],
    thresholds: Thresholds | None = None,
    judge: LlmJudge | None = None,
    agent: str | None = None,
    check_text: Callable[[str], str | None] = lambda text: None,
    progress: Progress = _no_progress,
    now: float | None = None,
) -> dict:
    """Plan (and with ``execute`` apply) one run; returns its report, as ``save`` was last given it.

    ``check_text`` says why a summary an LLM wrote must not be stored (a secret in it), or None.
    """
    started = time.time() if now is None else now
    planner = Planner(thresholds or Thresholds(), now=started)
    total, cursor, scanned = store.count(), None, 0
    progress("scan", 0, total)
    while True:
        page, cursor = store.scan_points(PAGE, cursor, agent)
        planner.add(page)
        scanned += len(page)
        progress("scan", scanned, max(total, scanned))
        if cursor is None:
            break
    scanned_payloads = dict(planner.payloads)
    plan = planner.build(lambda done, of: progress("plan", done, of))
    if judge is not None:
        _ask_judge(plan, judge, run_id, scanned_payloads, check_text, progress)
    plan.recount()
    refusal = plan.refusal()
    report = _report(plan, run_id, started, execute, judge, agent)
    if refusal:
        report.update(state="refused", refused=refusal)
    elif not execute:
        report["state"] = "planned"
    elif not plan.superseded():
        report["state"] = "applied"  # nothing to change
    save(report)
    if report["state"] != "applying":
        return _finished(report, save)
    delta = _delta(plan, run_id, started, scanned_payloads)
    progress("apply", 0, len(delta.olds))
    store.exclusive(lambda batch: _apply(batch, delta, report, save))
    progress("apply", len(delta.olds), len(delta.olds))
    return _finished(report, save)


def _finished(report: dict, save: Callable[[dict], None]) -> dict:
    report["finished_at"] = iso_now()
    save(report)
    return report


# ------------------------------------------------------------------ the LLM's part


def _ask_judge(
    plan: Plan,
    judge: LlmJudge,
    run_id: str,
    payloads: Mapping[str, Mapping],
    check_text: Callable[[str], str | None],
    progress: Progress,
) -> None:
    """Conflicts resolved, task groups summarised, where the LLM's answer can be used."""
    asked = [c for c in plan.clusters if c.kind == "tasks" or (c.kind == "conflict" and not c.note)]
    for done, cluster in enumerate(asked, 1):
        statements = [Statement(m.text, str(payloads[m.id].get("created_at") or "")) for m in cluster.members]
        try:
            if cluster.kind == "conflict" and len(statements) <= MAX_CONFLICT_GROUP:
                _resolve(cluster, judge.outdated(statements))
            elif cluster.kind == "tasks":
                _summarise(cluster, judge.summary(statements), run_id, check_text)
        except JudgeError as exc:
            cluster.note = f"LLM: {exc}"
        progress("llm", done, len(asked))


def _resolve(cluster: Cluster, pairs: list[tuple[int, int]]) -> None:
    ids = [m.id for m in cluster.members]
    if not pairs:
        cluster.note = "LLM: all of these hold at once"
        return
    cluster.superseded = {ids[old]: ids[new] for old, new in pairs}
    cluster.action = "resolve"


def _summarise(cluster: Cluster, text: str, run_id: str, check_text: Callable[[str], str | None]) -> None:
    refused = check_text(text)
    if refused:
        cluster.note = f"LLM summary not stored: {refused}"
        return
    cluster.summary = text
    cluster.created = point_id_of(str(cluster.scope["agent_id"]), _summary_write_id(run_id, cluster.number))
    cluster.superseded = {m.id: cluster.created for m in cluster.members}
    cluster.action = "summarise"


def _summary_write_id(run_id: str, cluster: int) -> str:
    return f"consolidation-{run_id}-{cluster}"


# ------------------------------------------------------------------ the report


def _report(plan: Plan, run_id: str, started: float, execute: bool, judge: LlmJudge | None, agent: str | None) -> dict:
    return {
        "version": REPORT_VERSION,
        "run_id": run_id,
        "mode": "execute" if execute else "dry-run",
        "state": "applying",
        "started_at": iso_now(started),
        "finished_at": None,
        "agent": agent,
        "settings": {
            **plan.thresholds.to_dict(),
            "guard_version": GUARD_VERSION,
            "llm": judge.model if judge else None,
        },
        "scanned": plan.scanned,
        "valid": sum(c.valid for c in plan.agents.values()),
        "agents": {name: counts.to_dict() for name, counts in sorted(plan.agents.items())},
        "clusters": [c.to_dict() for c in plan.clusters],
        "refused": None,
        "actions": [],
        "skipped": [],
        "before": {},
        "after": {},
        "created": [],
        "undo": None,
    }


# ------------------------------------------------------------------ applying


class _Delta:
    """The plan's changes: summaries to add, and for each replacing id the memories it supersedes."""

    def __init__(self) -> None:
        self.added: list[tuple[Cluster, NewMemory]] = []
        self.by: dict[str, list[str]] = defaultdict(list)
        self.olds: dict[str, Cluster] = {}
        self.at = ""
        self.scanned: Mapping[str, Mapping] = {}


def _delta(plan: Plan, run_id: str, now: float, scanned: Mapping[str, Mapping]) -> _Delta:
    delta = _Delta()
    delta.at, delta.scanned = iso_now(now), scanned
    for cluster in plan.clusters:
        if cluster.created and cluster.summary:
            delta.added.append((cluster, _summary_memory(cluster, run_id, delta.at, scanned)))
        for old, by in cluster.superseded.items():
            if old in delta.olds:
                continue  # never twice (the planner keeps findings apart; this keeps the batch sound)
            delta.olds[old] = cluster
            delta.by[by].append(old)
    return delta


def _summary_memory(cluster: Cluster, run_id: str, at: str, scanned: Mapping[str, Mapping]) -> NewMemory:
    """The knowledge memory an LLM wrote for a task-log group: in the logs' scope, trusted as the least
    trusted of them (a summary knows no more than its sources), its source ``inferred``."""
    scope = cluster.scope
    trusts = [str(scanned.get(m.id, {}).get("trust") or DEFAULT_TRUST) for m in cluster.members]
    return NewMemory(
        write_id=_summary_write_id(run_id, cluster.number),
        agent_id=str(scope["agent_id"]),
        text=str(cluster.summary),
        memory_type=SUMMARY_TYPE,
        visibility=str(scope["visibility"]),
        project_id=scope.get("project_id"),
        created_at=at,
        expiration_date=None,
        expires_at=None,
        user_id=scope.get("user_id"),
        run_id=scope.get("run_id"),
        extra={"consolidation_run": run_id},
        trust=min(trusts, key=lambda t: TRUST_RANK.get(t, TRUST_RANK[DEFAULT_TRUST])),
        provenance=INFERRED_SOURCE,
    )


def _apply(batch: BatchStore, delta: _Delta, report: dict, save: Callable[[dict], None]) -> None:
    """Inside the store's exclusive call: check, record ``before``, change, record ``after``."""
    replacing = set(delta.by) - {c.created for c, _ in delta.added}
    current = batch.payloads(sorted(set(delta.olds) | replacing))
    gone = {by for by in replacing if by not in current or not is_valid(current[by], time.time())}
    for old, cluster in delta.olds.items():
        why = None
        if _unused(current.get(old)) != _unused(delta.scanned.get(old)):
            why = "changed since the scan"
        elif cluster.superseded[old] in gone:
            why = f"the memory that replaces it ({cluster.superseded[old]}) is no longer valid"
        if why:
            report["skipped"].append({"id": old, "cluster": cluster.number, "why": why})
    skipped = {s["id"] for s in report["skipped"]}
    adds = [(c, m) for c, m in delta.added if any(old not in skipped for old in c.superseded)]
    report["before"] = {old: current[old] for old in delta.olds if old not in skipped}
    report["created"] = [c.created for c, _ in adds]
    # what each change will be, so that a run cut off before ``after`` is written can be undone too
    report["pending"] = {
        "at": delta.at,
        "superseded": {old: c.superseded[old] for old, c in delta.olds.items() if old not in skipped},
    }
    save(report)  # the undo record is on disk before anything changes
    if adds:
        batch.add_memories([m for _, m in adds])
        report["actions"] += [{"op": "add", "id": c.created, "cluster": c.number} for c, _ in adds]
    for by, olds in delta.by.items():
        targets = [old for old in olds if old not in skipped]
        if targets:
            batch.supersede(targets, by, delta.at)
            report["actions"].append({"op": "supersede", "ids": targets, "by": by, "at": delta.at})
    report["after"] = batch.payloads(sorted([*report["before"], *report["created"]]))
    report["state"] = "applied"
    report.pop("pending", None)


# ------------------------------------------------------------------ undo


def undo(store: ConsolidationStore, report: dict, save: Callable[[dict], None], force: bool = False) -> dict:
    """Put back every payload ``report`` changed and delete what it added; returns what was done."""
    state = report.get("state")
    if state == "undone":
        raise UndoRefused(f"run {report['run_id']} was undone already, at {report['undo']['at']}")
    if state not in ("applied", "applying"):
        raise UndoRefused(f"run {report['run_id']} changed nothing (it was {state}): there is nothing to undo")
    result = store.exclusive(lambda batch: _undo(batch, report, force))
    report["state"] = "undone"
    report["undo"] = result
    save(report)
    return result


def _undo(batch: BatchStore, report: dict, force: bool) -> dict:
    before: dict[str, dict] = report.get("before") or {}
    after: dict[str, dict] = dict(report.get("after") or {})
    created: list[str] = report.get("created") or []
    pending = report.get("pending") or {}
    for memory_id, by in (pending.get("superseded") or {}).items():  # a run cut off: what it was writing
        if memory_id not in after and memory_id in before:
            after[memory_id] = {**before[memory_id], **validity.supersede_payload(by, pending["at"])}
    current = batch.payloads(sorted({*before, *created}))
    changed = []
    for memory_id, payload in before.items():
        now = _unused(current.get(memory_id))
        if now != _unused(payload) and now != _unused(after.get(memory_id)):
            changed.append(memory_id)
    changed += [i for i in created if i in current and i in after and _unused(current[i]) != _unused(after[i])]
    # a summary a cut-off run wrote but did not read back: it is the run's own, deleted like the others
    if changed and not force:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise UndoRefused(
            f"{len(changed)} memories changed since run {report['run_id']} ({shown}): nothing restored; "
            "--force restores them to before the run anyway"
        )
    restore = {i: p for i, p in before.items() if _unused(current.get(i)) != _unused(p)}
    if restore:
        batch.restore_validity(restore)
    present = [i for i in created if i in current]
    if present:
        batch.delete_ids(present)
    check = batch.payloads(sorted({*before, *created}))
    differ = [i for i, p in before.items() if _compared(check.get(i), force) != _compared(p, force)]
    differ += [i for i in created if i in check]
    if differ:
        raise UndoRefused(f"undo left {len(differ)} memories not as before the run: {', '.join(differ[:5])}")
    return {"at": iso_now(), "restored": len(restore), "deleted": len(present), "forced": bool(changed)}


def _compared(payload: Mapping | None, lifecycle_only: bool) -> object:
    """What undo checks it put back: the whole payload, or (forced over later edits) its lifecycle fields."""
    if payload is None or not lifecycle_only:
        return _unused(payload)
    return {name: payload.get(name) for name in validity.LIFECYCLE_FIELDS}


def _unused(payload: Mapping | None) -> dict | None:
    """A payload without its use counts: the daemon adds hits in the background (layers/conversation/policy/decay.py),
    which says nothing about what a memory states; undo neither stops for them nor takes them back."""
    if payload is None:
        return None
    return {k: v for k, v in payload.items() if k not in (ACCESS_COUNT, LAST_ACCESSED)}
