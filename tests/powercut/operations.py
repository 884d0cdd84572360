"""The acknowledged operations a power cut is tried against: each performs one and writes down in the
root's ledger what was acknowledged (the cut and the checks are the caller's: a test, or the bench).
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml

from layers import daily
from layers.fsutil import atomic_write
from tests.helpers import wait_for
from tests.powercut.harness import PowerCutRoot


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
    assert rig.daemon is not None
    with rig.daemon.client(rig.token(agent)) as client:
        return client.add(agent, text, write_id=f"w-{uuid.uuid4().hex[:12]}", **options)


def added_id(answer: dict, rig: PowerCutRoot | None = None, agent: str = "a", text: str = "") -> str:
    """The acknowledged write's memory id; a write answered ``queued`` (durable, behind earlier ones) is
    looked up once applied."""
    if "results" in answer:
        return answer["results"][0]["id"]
    assert answer.get("queued") and rig is not None and rig.daemon is not None, json.dumps(answer)
    daemon = rig.daemon

    def applied() -> str | None:
        with daemon.client(rig.token(agent)) as client:
            found = [m["id"] for m in client.get_all(agent, limit=100)["results"] if m["memory"] == text]
        return found[0] if found else None

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
    write_ids = []
    for text in texts:
        answer = add(rig, "a", text)
        assert answer.get("queued"), answer
        write_ids.append(answer)
    _set_store(rig, {k: v for k, v in embedded.items() if v is not None} | {"backend": "embedded"})
    wait_for(
        lambda: rig.daemon.status()["conversation"]["queue"]["depth"] == 0,
        timeout=60,
        what=f"replayed: {rig.daemon.status()['conversation']}",
    )
    with rig.daemon.client(rig.token("a")) as client:
        listed = client.get_all("a", limit=100)["results"]
    for text in texts:
        (memory,) = [m for m in listed if m["memory"] == text]
        rig.ledger.memories[memory["id"]] = ("a", text, "valid")


L4_OPERATIONS: dict[str, Callable[[PowerCutRoot], None]] = {
    "add": direct_adds,
    "add queued, replayed": queued_then_replayed,
    "supersede": supersede,
    "update": update,
    "delete": delete,
    "restore": restore,
}
