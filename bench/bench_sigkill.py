"""SIGKILL at random moments while agents write: every acknowledged write exactly once afterwards.

Issue 45's power cuts are the hard case; this is the one it must not lose on the way (its target: "the
SIGKILL figures stay at 0 lost, 0 duplicated").  Two agents add L4 memories without pause (one in
four a supersede of its previous one), and a third writer appends notes to their daily files, while
the daemon (and all it started) is SIGKILLed 0.3-3 s (drawn at random) after its store is serving, and
started again on the same disk (tests/powercut/harness.py: the root on a loop-mounted image, the daemon in a
pid namespace of its own).  A write that failed because the daemon died is retried with the same
write_id until it is acknowledged, as a client should: only acknowledged writes are in the ledger.
After the last kill every acknowledged memory is checked (found once, with its text and state), every
note once in its file, and ``git fsck --full`` clean in every workspace and history copy.

Printed: kills, acknowledged writes, lost / duplicated / corrupt; nothing is asserted.
``--kills N`` (100 by default).  Root only (loop devices).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_power_cut import _root, classify
from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError
from layers.daily import workspace_repo as daily
from tests.helpers import wait_for
from tests.powercut.harness import PowerCutRoot, all_memories, loop_devices_usable
from tests.stand_in_embedder import StandInEmbedder

KILLS = 100
AGENTS = ("main", "a")


class _Writers:
    """The load: an L4 writer per agent and a note writer, each retrying a write until it is acknowledged."""

    def __init__(self, rig: PowerCutRoot) -> None:
        self.rig = rig
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acknowledged = 0
        self.retries = 0
        self.queued: list[tuple[str, str]] = []  # (agent, text) of adds answered ``queued``
        self.threads = [threading.Thread(target=self._memories, args=(agent,), daemon=True) for agent in AGENTS]
        self.threads.append(threading.Thread(target=self._notes, daemon=True))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def _until_acknowledged(self, agent: str, text: str, **options) -> dict:
        write_id = f"k-{uuid.uuid4().hex[:12]}"  # the same id on every retry: written once
        while True:
            daemon = self.rig.daemon
            try:
                assert daemon is not None
                with daemon.client(self.rig.token(agent), timeout=30) as client:
                    return client.add(agent, text, write_id=write_id, **options)
            except (DaemonUnavailableError, DaemonRequestError, OSError) as exc:
                if isinstance(exc, DaemonRequestError) and exc.status < 500 and exc.status not in (409, 429):
                    raise
                with self.lock:
                    self.retries += 1
                time.sleep(0.05)

    def _memories(self, agent: str) -> None:
        previous: str | None = None
        n = 0
        while not self.stop.is_set():
            n += 1
            text = f"{agent} memory {n} ({uuid.uuid4().hex[:6]})"
            supersede = previous is not None and n % 4 == 0
            answer = self._until_acknowledged(agent, text, **({"supersedes": previous} if supersede else {}))
            # answered queued: durable, its id known once applied (checked by its text at the end)
            memory_id = None if answer.get("queued") else answer["results"][0]["id"]
            with self.lock:
                self.acknowledged += 1
                if memory_id is not None:
                    if supersede and previous is not None:
                        _, old_text, _ = self.rig.ledger.memories[previous]
                        self.rig.ledger.memories[previous] = (agent, old_text, "superseded")
                    self.rig.ledger.memories[memory_id] = (agent, text, "valid")
                else:
                    self.queued.append((agent, text))
            previous = memory_id

    def _notes(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            agent = AGENTS[n % len(AGENTS)]
            line = f"sigkill note {n} of {agent} {uuid.uuid4().hex[:8]}"
            path = daily.append_note(self.rig.workspace(agent), line)
            with self.lock:
                self.rig.ledger.notes.append((agent, path.relative_to(self.rig.workspace(agent)).as_posix(), line))
                self.acknowledged += 1
            time.sleep(0.05)


def main(quick: bool = False, kills: int | None = None) -> None:
    if why := loop_devices_usable():
        print(f"skipped: {why}")
        return
    kills = kills if kills is not None else (10 if quick else KILLS)
    embedder = StandInEmbedder()
    rng = random.Random(45)
    with tempfile.TemporaryDirectory(prefix="bench-sigkill-") as tmp:
        rig = _root(Path(tmp), embedder)
        writers = _Writers(rig)
        started = time.monotonic()
        try:
            writers.start()
            for n in range(kills):
                daemon = rig.daemon
                assert daemon is not None
                # a kill while the store serves (a daemon killed before its store opened would test nothing)
                wait_for(lambda d=daemon: d.status()["conversation"]["reachable"], timeout=120, what="the store")
                time.sleep(rng.uniform(0.3, 3.0))
                rig.crash()
                if (n + 1) % 10 == 0:
                    print(f"  {n + 1}/{kills} kills, {writers.acknowledged} writes acknowledged", flush=True)
            writers.join()
            took = time.monotonic() - started
            daemon = rig.daemon
            assert daemon is not None
            began = time.monotonic()
            wait_for(
                lambda: (q := daemon.status()["conversation"])["reachable"] and not q["queue"]["depth"],
                timeout=600,
                what=f"the store back and the queue drained: {daemon.status()['conversation']}",
            )
            drained = time.monotonic() - began
            problems = rig.check()
            # answered `queued`: applied later, at most once, each found by its text
            stored = {agent: Counter(m.get("memory") for m in all_memories(rig, agent)) for agent in AGENTS}
            for agent, text in writers.queued:
                if stored[agent][text] != 1:
                    problems.append(f"queued write {text!r} of {agent} is stored {stored[agent][text]} times")
        except BaseException:
            if rig.daemon is not None:  # the daemon's own account, before the directory goes
                print(f"the last daemon's log (its tail):\n{rig.daemon.log()[-3000:]}", flush=True)
            print(f"mounted: {os.path.ismount(rig.disk.mount)}", flush=True)
            raise
        finally:
            rig.close()
            embedder.close()
    kinds = [classify(p) for p in problems]
    for problem in problems[:20]:
        print(f"  {problem[:300]}")
    print(
        f"{kills} SIGKILLs in {took:.0f} s: {writers.acknowledged} writes acknowledged ({len(rig.ledger.memories)} "
        f"memories answered at once, {len(writers.queued)} answered queued, {len(rig.ledger.notes)} notes; "
        f"{writers.retries} retries after a kill; drained {drained:.0f} s after the last kill): "
        f"lost {kinds.count('lost')}, duplicated {kinds.count('duplicated')}, corrupt {kinds.count('corrupt')}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=KILLS)
    args = parser.parse_args()
    main(kills=args.kills)
