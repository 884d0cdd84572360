"""A power cut right after the daemon acknowledged an L4 write loses none of them, nor doubles any.

Reproduced on main (issue 45): a cut 1 s after the last acknowledgement lost every acknowledged
L4 write (the Edge shard is flushed only at close).  These pass once the L4 write-ahead log
(branch i45-wal) lands; each test cuts the power once on a root on a loop image
(tests/powercut/harness.py) and checks every acknowledged memory by id and text, exactly once.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator

import pytest
import yaml

from layers.fsutil import atomic_write
from tests.helpers import FAST, wait_for
from tests.powercut.harness import Ledger, PowerCutRoot, loop_devices_usable, needs_loop_devices
from tests.stand_in_embedder import StandInEmbedder

pytestmark = [needs_loop_devices, pytest.mark.slow]

CUT_AFTER_S = 1.0
COLLECTION = "mem0_v4_shared"


@pytest.fixture(scope="module")
def l4_root(tmp_path_factory) -> Iterator[PowerCutRoot]:
    if why := loop_devices_usable():
        pytest.skip(why)
    embedder = StandInEmbedder()
    workdir = tmp_path_factory.mktemp("powercut-l4")
    overrides = {**FAST, "conversation": {"enabled": True, "backend": "embedded", "probe_interval_s": 0.5}}
    scratch = workdir / "embedder.yaml"
    scratch.write_text("{}")
    env = embedder.configure(scratch)
    overrides["vectors"] = yaml.safe_load(scratch.read_text())["vectors"]
    rig = PowerCutRoot(workdir, overrides, agents=("a",), env=env)
    try:
        rig.create()
        assert rig.daemon is not None
        wait_for(lambda: rig.daemon.status()["conversation"]["reachable"], timeout=90, what="store reachable")
        yield rig
    finally:
        rig.close()
        embedder.close()


@pytest.fixture
def rig(l4_root: PowerCutRoot) -> PowerCutRoot:
    """The module's root, with a ledger of this test's acknowledgements only (a loss is one test's failure)."""
    l4_root.ledger = Ledger()
    daemon = l4_root.daemon
    assert daemon is not None  # after the previous test's cut its store takes a moment to open
    wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=90, what="store reachable")
    return l4_root


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


def cut_and_check(rig: PowerCutRoot) -> None:
    rig.cut(CUT_AFTER_S)
    assert rig.check() == []


def test_direct_adds_survive_a_cut(rig: PowerCutRoot):
    for i in range(5):
        text = f"direct add {i} before cut {rig.disk.cuts}"
        rig.ledger.memories[added_id(add(rig, "a", text), rig, "a", text)] = ("a", text, "valid")
    cut_and_check(rig)


def test_a_supersede_survives_a_cut(rig: PowerCutRoot):
    old_text, new_text = f"the port is 6333 ({rig.disk.cuts})", f"the port is 6334 ({rig.disk.cuts})"
    old = added_id(add(rig, "a", old_text), rig, "a", old_text)
    rig.disk.sync()  # the first write is old news: the cut is about the supersede
    rig.ledger.memories[old] = ("a", old_text, "valid")
    new = added_id(add(rig, "a", new_text, supersedes=old), rig, "a", new_text)
    rig.ledger.memories[old] = ("a", old_text, "superseded")
    rig.ledger.memories[new] = ("a", new_text, "valid")
    cut_and_check(rig)


def test_an_update_survives_a_cut(rig: PowerCutRoot):
    before = f"meeting on Tuesday ({rig.disk.cuts})"
    memory = added_id(add(rig, "a", before), rig, "a", before)
    rig.disk.sync()
    text = f"meeting on Wednesday ({rig.disk.cuts})"
    assert rig.daemon is not None
    with rig.daemon.client(rig.token("a")) as client:
        client.update("a", memory, text)
    rig.ledger.memories[memory] = ("a", text, "valid")
    cut_and_check(rig)


def test_a_delete_survives_a_cut(rig: PowerCutRoot):
    text = f"to be deleted ({rig.disk.cuts})"
    memory = added_id(add(rig, "a", text), rig, "a", text)
    rig.disk.sync()
    assert rig.daemon is not None
    with rig.daemon.client(rig.token("a")) as client:
        client.delete("a", memory)
    rig.ledger.memories[memory] = ("a", text, "deleted")
    cut_and_check(rig)


def test_a_restore_survives_a_cut(rig: PowerCutRoot):
    old_text, new_text = f"tea ({rig.disk.cuts})", f"coffee ({rig.disk.cuts})"
    old = added_id(add(rig, "a", old_text), rig, "a", old_text)
    new = added_id(add(rig, "a", new_text, supersedes=old), rig, "a", new_text)
    rig.disk.sync()
    assert rig.daemon is not None
    with rig.daemon.client(rig.token("a")) as client:
        client.restore_memory("a", old)
    rig.ledger.memories[old] = ("a", old_text, "valid")
    rig.ledger.memories[new] = ("a", new_text, "valid")
    cut_and_check(rig)


def _set_store(rig: PowerCutRoot, conversation: dict) -> None:
    data = yaml.safe_load(rig.config.read_text())
    data["conversation"] = {**data["conversation"], **conversation}
    atomic_write(rig.config, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    rig.disk.sync()  # the test's own edit of the configuration is no acknowledged write: on the disk at once
    assert rig.daemon is not None
    rig.daemon.signal_daemon(signal.SIGHUP)


def test_queued_then_replayed_adds_survive_a_cut(rig: PowerCutRoot):
    """The store away (a remote one refusing connections, by a reload): adds answered ``queued``; back, they
    replay; the cut comes after the replay."""
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
    cut_and_check(rig)
