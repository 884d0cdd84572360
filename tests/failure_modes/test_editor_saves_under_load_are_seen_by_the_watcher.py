"""Editor-style saves under load are each indexed and committed by the watcher, never by the periodic re-check.

Before (issue 51): in a 25-minute soak, three rename-saves were reported as "missed by the watcher"
and found by the periodic re-check.  Driven much harder here (six agents, each saving a note every
~100 ms by a rename over it, vim's backup-rename or into a new directory, with L4 adds and L3/L4
searches alongside), the watcher saw every save: what the re-check "repaired" were saves whose
events the loop had taken but not yet processed (in their debounce, or settled and queued behind
the others), and it counted them as missed.  The count named no real miss, and hid one had there
been one.  Now a re-check leaves a change the watcher already reported to the watcher's flow (it is
still brought up to date) and counts only what no event announced.

The periodic re-check runs every 3 s here, many times during the load: a save the watcher missed
would be counted ("the watcher had missed" in the log, ``reconcile.repaired`` in status).  Every
save's last version must be searchable and committed, and nothing counted as missed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from layers.local.storage.index import Filters, open_for_reading
from tests.editor_saves import STYLES, unique_word
from tests.helpers import FAST, file_at_head, init_root, run_cli, token_of, wait_for
from tests.stand_in_embedder import StandInEmbedder

pytestmark = pytest.mark.slow

SPOKES = ["e1", "e2", "e3", "e4", "e5"]
LOAD_S = 20.0


def _saver(workspace: Path, agent: str, stop: threading.Event, last: dict, lock: threading.Lock, n0: int) -> None:
    k = 0
    while not stop.is_set():
        style = list(STYLES)[k % len(STYLES)]
        n = n0 + k
        rel = f"memory/projects/p{n}/notes.md" if style == "new-dir" else f"memory/2026-11-{k % 4 + 1:02d}.md"
        word = unique_word(n)
        STYLES[style](workspace / rel, f"# note {n}\n\n- {word} saved {style}-style\n")
        with lock:
            last[(agent, rel)] = word
        k += 1
        time.sleep(0.1)


def _caller(socket: Path, token: str, agent: str, stop: threading.Event, errors: list) -> None:
    i = 0
    with DaemonClient(socket, timeout=60, token=token) as client:
        while not stop.is_set():
            i += 1
            try:
                client.add(agent, f"{agent} remembers the pump number {i} in shed {i % 7}")
                client.search(agent, "saved note")
                client.memory_search(agent, "pump in the shed")
            except Exception as exc:  # every failure is reported below
                errors.append(exc)
            time.sleep(0.3)


def test_rename_saves_under_load_are_seen_by_the_watcher_within_the_debounce(tmp_path, daemons):
    embedder = StandInEmbedder()
    try:
        config = init_root(tmp_path, **FAST)
        for agent in SPOKES:
            run_cli("agent", "add", agent, config=config)
        env = embedder.configure(config)
        data = yaml.safe_load(config.read_text())
        data["conversation"].update(enabled=True, backend="embedded")
        data["watch"]["reconcile_interval_s"] = 3
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        workspaces = {"main": tmp_path / "workspace"}
        workspaces.update({a: tmp_path / "workspace" / "agents" / f"{a}-workspace" for a in SPOKES})
        d = daemons(config, env=env)
        wait_for(lambda: d.status()["conversation"]["reachable"], timeout=120, what="the L4 store")
        first_check = d.status()["reconcile"]["time"]

        stop, lock = threading.Event(), threading.Lock()
        last: dict[tuple[str, str], str] = {}
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_saver, args=(ws, a, stop, last, lock, 100_000 * i))
            for i, (a, ws) in enumerate(workspaces.items())
        ]
        threads += [
            threading.Thread(target=_caller, args=(d.socket, token_of(tmp_path, a), a, stop, errors))
            for a in workspaces
        ]
        for t in threads:
            t.start()
        time.sleep(LOAD_S)
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors[:3]

        readers = {a: open_for_reading(Path(d.agent(a)["index"]["path"])) for a in workspaces}
        try:

            def unseen() -> list:
                return [
                    (a, rel, word)
                    for (a, rel), word in last.items()
                    if not readers[a].search_text(f'"{word}"', 2, Filters())
                    or word not in (file_at_head(workspaces[a], rel) or "")
                ]

            wait_for(
                lambda: not unseen(), timeout=180, interval=1, what=f"every save indexed and committed: {unseen()[:5]}"
            )
        finally:
            for r in readers.values():
                r.close()
        reconcile = d.status()["reconcile"]
        assert reconcile["time"] != first_check, "the periodic re-check ran during the load"
        missed = [line for line in d.log().splitlines() if "the watcher missed" in line]
        assert not missed, f"{len(last)} files saved; the re-check found what the watcher had not seen: {missed}"
    finally:
        embedder.close()
