"""The acknowledged operations a power cut is tried against: each performs one and writes down in the
root's ledger what was acknowledged (the cut and the checks are the caller's: a test, or the bench).
"""

from __future__ import annotations

import functools
import json
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml

from daemon.front.daemon_client import DaemonRequestError
from layers.common.fsutil import atomic_write
from layers.conversation.lifecycle.write_ids import point_id_of
from layers.daily import workspace_repo as daily
from protocol import operations as op
from tests.helpers import wait_for
from tests.powercut.harness import PowerCutRoot, all_memories


def note_commit(rig: PowerCutRoot, agents: tuple[str, ...] = ("main", "a")) -> None:
    """A note appended (acknowledged when ``append_note`` returns) and the daemon's commit of it (when status
    reports it, not pending)."""
    for agent in agents:
        line = f"power cut note of {agent} #{rig.disk.cuts} {uuid.uuid4().hex[:8]}"
        path = daily.append_note(rig.workspace(agent), line)
        rel = path.relative_to(rig.workspace(agent)).as_posix()
        rig.ledger.notes.append((agent, rel, line))
        rig.ledger.commits.append((agent, _commit_of(rig, agent, rel, line)))


def _commit_of(rig: PowerCutRoot, agent: str, rel: str, line: str) -> str:
    workspace: Path = rig.workspace(agent)

    def committed() -> str | None:
        assert rig.daemon is not None
        report = rig.daemon.agent(agent)
        if report["pending_commit"] or report["last_commit"] is None:
            return None
        repo = daily.WorkspaceRepo(workspace)
        sha = repo.resolve("HEAD")
        return sha if line in repo.read_at(sha, rel).decode() else None

    return wait_for(committed, timeout=30, what=f"the commit of {rel}")


def add(rig: PowerCutRoot, agent: str, text: str, **options) -> dict:
    """The daemon's answer, with the write id it was sent under (``sent_write_id``)."""
    assert rig.daemon is not None
    write_id = f"w-{uuid.uuid4().hex[:12]}"
    with rig.daemon.client(rig.token(agent)) as client:
        return {**client.add(agent, text, write_id=write_id, **options), "sent_write_id": write_id}


def added_id(answer: dict, rig: PowerCutRoot | None = None, agent: str = "a", text: str = "") -> str:
    """The acknowledged write's memory id; a write answered ``queued`` (durable, behind earlier ones) is
    read back at its deterministic id (``point_id_of(owner, write_id)``) once applied: a listing's first
    page would miss it once a matrix's runs have stored more than a page."""
    if "results" in answer:
        return answer["results"][0]["id"]
    assert answer.get("queued") and rig is not None and rig.daemon is not None, json.dumps(answer)
    daemon = rig.daemon
    memory_id = point_id_of(agent, answer["sent_write_id"])

    def applied() -> str | None:
        with daemon.client(rig.token(agent)) as client:
            try:
                found = client.get(agent, memory_id)
            except DaemonRequestError:
                return None
        return memory_id if found.get("memory") == text else None

    return wait_for(applied, timeout=60, what=f"queued write {text!r} applied: {daemon.status()['conversation']}")


def direct_adds(rig: PowerCutRoot) -> None:
    for i in range(5):
        text = f"direct add {i} before cut {rig.disk.cuts}"
        rig.ledger.memories[added_id(add(rig, "a", text), rig, "a", text)] = ("a", text, "valid")


def supersede(rig: PowerCutRoot) -> None:
    old_text, new_text = f"the port is 6333 ({rig.disk.cuts})", f"the port is 6334 ({rig.disk.cuts})"
    old = added_id(add(rig, "a", old_text), rig, "a", old_text)
    rig.disk.sync()  # the first write is old news: the cut is about the supersede
    rig.ledger.memories[old] = ("a", old_text, "valid")
    new = added_id(add(rig, "a", new_text, supersedes=old), rig, "a", new_text)
    rig.ledger.memories[old] = ("a", old_text, "superseded")
    rig.ledger.memories[new] = ("a", new_text, "valid")


def update(rig: PowerCutRoot) -> None:
    before = f"meeting on Tuesday ({rig.disk.cuts})"
    memory = added_id(add(rig, "a", before), rig, "a", before)
    rig.disk.sync()
    text = f"meeting on Wednesday ({rig.disk.cuts})"
    assert rig.daemon is not None
    with rig.daemon.client(rig.token("a")) as client:
        client.update("a", memory, text)
    rig.ledger.memories[memory] = ("a", text, "valid")


def delete(rig: PowerCutRoot) -> None:
    text = f"to be deleted ({rig.disk.cuts})"
    memory = added_id(add(rig, "a", text), rig, "a", text)
    rig.disk.sync()
    assert rig.daemon is not None
    with rig.daemon.client(rig.token("a")) as client:
        client.delete("a", memory)
    rig.ledger.memories[memory] = ("a", text, "deleted")


def restore(rig: PowerCutRoot) -> None:
    old_text, new_text = f"tea ({rig.disk.cuts})", f"coffee ({rig.disk.cuts})"
    old = added_id(add(rig, "a", old_text), rig, "a", old_text)
    new = added_id(add(rig, "a", new_text, supersedes=old), rig, "a", new_text)
    rig.disk.sync()
    assert rig.daemon is not None
    with rig.daemon.client(rig.token("a")) as client:
        client.restore_memory("a", old)
    rig.ledger.memories[old] = ("a", old_text, "valid")
    rig.ledger.memories[new] = ("a", new_text, "valid")


def _set_store(rig: PowerCutRoot, conversation: dict) -> None:
    data = yaml.safe_load(rig.config.read_text())
    data["conversation"] = {**data["conversation"], **conversation}
    atomic_write(rig.config, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    rig.disk.sync()  # the test's own edit of the configuration is no acknowledged write: on the disk at once
    assert rig.daemon is not None
    rig.daemon.signal_daemon(signal.SIGHUP)


def queued_then_replayed(rig: PowerCutRoot) -> None:
    """The store away (a remote one refusing connections, by a reload): adds answered ``queued``; back, they
    replay; the cut (the caller's) comes after the replay."""
    from tests.daemon.conversation_service import closed_port

    assert rig.daemon is not None
    embedded = {"backend": "embedded", "qdrant": yaml.safe_load(rig.config.read_text())["conversation"].get("qdrant")}
    _set_store(rig, {"backend": "remote", "qdrant": {"url": f"http://127.0.0.1:{closed_port()}", "timeout_s": 1}})
    wait_for(lambda: not rig.daemon.status()["conversation"]["reachable"], timeout=30, what="store away")
    texts = [f"queued add {i} before cut {rig.disk.cuts}" for i in range(4)]
    answers = []
    for text in texts:
        answer = add(rig, "a", text)
        assert answer.get("queued"), answer
        answers.append(answer)
    _set_store(rig, {k: v for k, v in embedded.items() if v is not None} | {"backend": "embedded"})
    wait_for(
        lambda: rig.daemon.status()["conversation"]["queue"]["depth"] == 0,
        timeout=60,
        what=f"replayed: {rig.daemon.status()['conversation']}",
    )
    for answer, text in zip(answers, texts, strict=True):
        rig.ledger.memories[added_id(answer, rig, "a", text)] = ("a", text, "valid")


# -- maintenance: consolidation, cleanup, a backup put back


def admin(rig: PowerCutRoot, operation: op.Operation) -> dict:
    """An administrator's maintenance request (the admin token), answered once it is done."""
    assert rig.daemon is not None
    with rig.daemon.client(timeout=120) as client:
        return client.call(operation)


def audit_lines(rig: PowerCutRoot, prefix: str) -> list[dict]:
    """Every line of the audit files ``<prefix>-*.log`` (``paths.audit_dir``: the main workspace's)."""
    folder = rig.workspace("main") / "logs" / "security"
    lines = []
    for path in sorted(folder.glob(f"{prefix}-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                lines.append({"unreadable": line[:200]})  # a line cut short: only an unsynced one may be
    return lines


def _duplicates(rig: PowerCutRoot) -> tuple[list[str], list[str]]:
    """Three memories of a's that consolidation folds whatever the embedder: the same text up to its
    punctuation (layers/conversation/consolidation/plan.py: an "exact" cluster; the write's own dedup,
    which keeps punctuation, stores all three).  The adds are made old news: the cut is about the run."""
    base = f"the cut {rig.disk.cuts} backup host is kestrel {uuid.uuid4().hex[:6]}"
    texts = [base, f"{base}.", f"{base}!"]
    ids = [added_id(add(rig, "a", text), rig, "a", text) for text in texts]
    for memory, text in zip(ids, texts, strict=True):
        rig.ledger.memories[memory] = ("a", text, "valid")
    rig.disk.sync()
    return ids, texts


def _applied(rig: PowerCutRoot) -> dict:
    """A consolidation of a's memories applied (max_share 1: the module's few memories are no refusal);
    the ledger takes what its report says it superseded (any memory an earlier run left valid too)."""
    answer = admin(rig, op.Consolidate(execute=True, agent="a", max_share=1.0))
    assert answer["state"] == "applied", answer
    report = json.loads(Path(answer["report"]).read_text())
    for memory, payload in report["after"].items():
        if memory in rig.ledger.memories and payload.get("superseded_by"):
            agent, text, _ = rig.ledger.memories[memory]
            rig.ledger.memories[memory] = (agent, text, "superseded")
    return report


def consolidation_apply(rig: PowerCutRoot) -> None:
    ids, _ = _duplicates(rig)
    report = _applied(rig)
    folded = [memory for memory in ids if report["after"].get(memory, {}).get("superseded_by")]
    assert len(folded) == 2, f"two of the three folded: {report['clusters']}"
    rig.ledger.reports.append(functools.partial(_run_holds, report["run_id"], "applied", report["after"]))


def consolidation_undo(rig: PowerCutRoot) -> None:
    ids, texts = _duplicates(rig)
    report = _applied(rig)
    rig.disk.sync()  # the run is old news: the cut is about its undo
    answer = admin(rig, op.Consolidate(undo=report["run_id"]))
    assert answer["state"] == "undone" and answer["undo"]["restored"] == 2, answer
    for memory, text in zip(ids, texts, strict=True):
        rig.ledger.memories[memory] = ("a", text, "valid")
    rig.ledger.reports.append(functools.partial(_run_holds, report["run_id"], "undone", {}))


def _run_holds(run_id: str, state: str, after: dict[str, dict], rig: PowerCutRoot) -> list[str]:
    """The run's RUN.json and audit line say ``state`` (acknowledged), and the store holds what its
    ``after`` says each superseded memory points at (the ledger checks the states themselves)."""
    path = rig.state_dir / "consolidation" / f"{run_id}.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"consolidation {run_id}, acknowledged {state}: its report is unreadable ({exc})"]
    problems = []
    if report.get("state") != state:
        problems.append(f"consolidation {run_id}, acknowledged {state}: its report says {report.get('state')}")
    if not any(e.get("run_id") == run_id and e.get("state") == state for e in audit_lines(rig, "memory-consolidation")):
        problems.append(f"consolidation {run_id}, acknowledged {state}: no audit line says so")
    stored = {m["id"]: m for m in all_memories(rig, "a")}
    for memory, payload in after.items():
        wanted = payload.get("superseded_by")
        if wanted and (stored.get(memory) or {}).get("superseded_by") != wanted:
            problems.append(f"consolidation {run_id} superseded {memory} by {wanted}: the store says otherwise")
    return problems


def cleanup(rig: PowerCutRoot) -> None:
    """Session memories (a type with a retention) removed by a forced cleanup (``max_age_days`` 0: a write
    cannot be given an ``expires`` in the past); only a's session memories are selected, so nothing an
    earlier operation acknowledged is touched."""
    texts = [f"session note {i} before cut {rig.disk.cuts}" for i in range(3)]
    ids = [added_id(add(rig, "a", text, type="session"), rig, "a", text) for text in texts]
    rig.disk.sync()
    answer = admin(rig, op.Cleanup(execute=True, max_age_days=0, memory_type="session", agent="a"))
    assert answer["deleted"] == len(ids) and not answer["errors"], answer
    for memory, text in zip(ids, texts, strict=True):
        rig.ledger.memories[memory] = ("a", text, "deleted")
    rig.ledger.reports.append(functools.partial(_cleanup_audited, ids))


def _cleanup_audited(ids: list[str], rig: PowerCutRoot) -> list[str]:
    """Each acknowledged deletion has its audit line, and no audit line names a deletion the store lacks."""
    deleted = {e.get("id") for e in audit_lines(rig, "memory-cleanup") if e.get("event") == "deleted"}
    problems = [
        f"cleanup deleted {memory} (acknowledged): no audit line says so" for memory in ids if memory not in deleted
    ]
    back = deleted & {m["id"] for m in all_memories(rig, "a")}
    problems += [f"cleanup's audit says {memory} was deleted, but the store holds it" for memory in sorted(back)]
    return problems


def backup_restored(rig: PowerCutRoot) -> None:
    """A backup taken, one more memory written, the backup put back: the store is the backup's (the later
    memory gone, the earlier one there) after the cut."""
    kept_text, later_text = (f"{w} the backup of cut {rig.disk.cuts}" for w in ("before", "after"))
    kept = added_id(add(rig, "a", kept_text), rig, "a", kept_text)
    archive = admin(rig, op.Backup())["backup"]
    later = added_id(add(rig, "a", later_text), rig, "a", later_text)
    rig.ledger.memories[kept] = ("a", kept_text, "valid")
    rig.disk.sync()  # the backup and both writes are old news: the cut is about the restore
    admin(rig, op.Restore(archive))
    rig.ledger.memories[later] = ("a", later_text, "deleted")


L4_OPERATIONS: dict[str, Callable[[PowerCutRoot], None]] = {
    "add": direct_adds,
    "add queued, replayed": queued_then_replayed,
    "supersede": supersede,
    "update": update,
    "delete": delete,
    "restore": restore,
    "consolidation apply": consolidation_apply,
    "consolidation undo": consolidation_undo,
    "cleanup": cleanup,
    "backup restored": backup_restored,
}
