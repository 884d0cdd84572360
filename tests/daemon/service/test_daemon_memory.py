"""The running daemon's memory: what loading the models takes is given back, and malloc keeps two arenas.

The figures themselves (idle VmRSS with 10 agents, +anonymous at 50k memories) are bench/bench_edge.py's;
these assert what holds whatever the host's load: structure (how many malloc arenas exist) and a
generous fraction of the models' memory coming back once they are unloaded.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from daemon.front.daemon_client import DaemonClient
from layers.common.malloc import ARENA_MAX
from tests.helpers import FAST, init_root, token_of, wait_for, wait_reachable

HEAP_MAX = 64 * 1024 * 1024  # glibc's reservation per arena heap on 64-bit (2 x the largest mmap threshold)


def _anonymous_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Anonymous line in smaps_rollup")


def _model_mapped(pid: int) -> bool:
    """llama.cpp maps the GGUF file while the model is loaded."""
    return ".gguf" in Path(f"/proc/{pid}/maps").read_text()


def malloc_arenas(pid: int) -> int:
    """How many arenas glibc's malloc made besides the main one (read from the process's heaps).

    A non-main arena lives in heaps: HEAP_MAX-aligned anonymous mappings, each starting with a
    ``heap_info`` whose first field is its arena's address (inside the arena's first heap).  The
    distinct addresses are the arenas (one arena may chain several heaps).
    """
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, _ = (int(x, 16) for x in fields[0].split("-"))
        if len(fields) == 5 and fields[1].startswith("rw") and start % HEAP_MAX == 0:
            regions.append(start)
    arenas = set()
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for start in regions:
            mem.seek(start)
            (ar_ptr,) = struct.unpack("<Q", mem.read(8))
            if any(r <= ar_ptr < r + HEAP_MAX for r in regions):
                arenas.add(ar_ptr)
    return len(arenas)


def _idle(d) -> bool:
    """Every chunk embedded and both models (the GGUF and the companion) unloaded, as status says."""
    status = d.status()
    pending = sum(a["index"].get("pending_embeddings") or 0 for a in status["agents"])
    v = status["vectors"]
    return not pending and v.get("loaded") is False and not v.get("companion_loaded")


def test_idle_daemon_gives_the_models_memory_back_and_keeps_two_malloc_arenas(tmp_path, daemons):
    """Reproduced before the fix (layers/common/malloc.py): "the main arena and 15 more" with one agent (every
    thread that allocates got its own arena, each keeping what it touched); loading and unloading both
    models in one process left ~35 MB more resident with glibc's dynamic mmap threshold than with
    the fixed one (docs/memory.md)."""
    config = init_root(tmp_path, **FAST, vectors={"idle_unload_s": 2, "unload": "idle"})
    d = daemons(config)
    pid = d.proc.pid
    wait_reachable(d)
    # L4 traffic, so the store thread, the API's threads and Edge's search pool all allocate
    with DaemonClient(d.socket, timeout=120, token=token_of(tmp_path, "main")) as client:
        for i in range(3):
            client.add("main", f"the deploy of service {i} moved to port 63{i}3")
        assert client.memory_search("main", "deploy port")["results"]
    wait_for(lambda: _idle(d), timeout=600, what="chunks embedded and both models unloaded")
    time.sleep(1)
    before = _anonymous_mb(pid)

    # a note to index: the embedding worker loads both models, embeds, and lets them go again
    note = tmp_path / "workspace" / "memory" / "2026-11-30.md"
    note.write_text("".join(f"# day {i}\n\n讨论了向量检索和记忆, release {i} of the store\n\n" for i in range(12)))
    peak = {"mb": before, "seen": False}

    def back_to_idle() -> bool:
        if _model_mapped(pid):
            peak["seen"] = True
            peak["mb"] = max(peak["mb"], _anonymous_mb(pid))
        return peak["seen"] and _idle(d)

    wait_for(back_to_idle, timeout=600, interval=0.1, what="the note embedded and both models unloaded again")
    time.sleep(1)
    after = _anonymous_mb(pid)
    added = peak["mb"] - before
    assert added > 100, f"loading the models added only {added:.0f} MB anonymous"
    assert after - before < 0.5 * added, f"idle {before:.0f} MB, loaded {peak['mb']:.0f} MB, unloaded {after:.0f} MB"
    arenas = malloc_arenas(pid)
    assert 1 + arenas <= ARENA_MAX, f"the main arena and {arenas} more (M_ARENA_MAX {ARENA_MAX})"
