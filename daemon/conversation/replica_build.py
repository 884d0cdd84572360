"""A replica's new generation built from the hub's snapshot in a child process (issue 48: a spoke's memory).

Why a child: built inside the daemon, a 50,000-memory hub's snapshot (36,500 memories for the spoke) took the
spoke's RSS from 80 MB idle to 321 MB, and its optimize afterwards to 463 MB (bench/bench_replica_50k.py).
What the build holds is the engine's: the in-memory payload indexes of the segment being written (~60 MB at
36,500 points), its vectors, payloads and write-ahead log mapped as they are written (~110 MB), then the
optimize's copy beside them.  None of it is needed once the generation is on disk, and a process's memory
goes back to the system whole when it exits.  So the child takes the pages, writes them with no payload
index, optimizes (the HNSW graph, one segment), then builds the indexes on the optimized segment (on disk),
syncs the tree and exits; the daemon only opens the finished generation (vectors and graph ``cold``:
replica_store.py).  The child runs nice, on one core, and dies with the thread that started it.

Between the two (one pipe each way; nothing on the command line, where ``ps`` would show the host key): the
daemon writes one JSON object on the child's stdin, ``{"hub": HubClient.handed(), "target", "parent",
"page"}``; the child prints a JSON line per page written (``{"memories": N}``) and a last one
(``{"done": {"epoch", "seq", "model", "memories", "projects"}}``).  It ends 0, or 3 (the hub unreachable:
:class:`HubUnreachable` in the daemon) or 4 (the snapshot cannot be applied: :class:`ReplicaError`), its
reason the last line of its stderr; any other ending is a ReplicaError naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.conversation.hub_client import HubClient, HubUnreachable
from daemon.conversation.replica_store import (
    PAGE,
    SNAPSHOT_PATH,
    ReplicaError,
    ask,
    new_shard,
    open_store,
    write,
)

UNREACHABLE, REFUSED = 3, 4  # the child's exit codes for HubUnreachable and ReplicaError


def build(
    client: HubClient,
    target: Path,
    on_page: Callable[[int], None],
    on_start: Callable[[subprocess.Popen | None], None] = lambda child: None,
    page: int = PAGE,
) -> dict[str, Any]:
    """The hub's snapshot into a new generation at ``target``, by a child process; what it stands at (the
    ``done`` object above).  ``on_page`` hears the memories written so far; ``on_start`` gets the child (a
    caller that stops kills it) and None once it has ended.  Raises HubUnreachable or ReplicaError, and
    then ``target`` may hold a part: the caller removes it."""
    request = {"hub": client.handed(), "target": str(target), "parent": os.getpid(), "page": page}
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", "daemon.conversation.replica_build"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            close_fds=True,
            cwd=str(Path(__file__).resolve().parents[2]),  # -m puts it first on the path: `daemon` is found there
            env={**os.environ, "RAYON_NUM_THREADS": "1"},
        )
        on_start(child)
        done: dict[str, Any] | None = None
        try:
            assert child.stdin is not None and child.stdout is not None
            with contextlib.suppress(BrokenPipeError):  # a child that died at once: its ending says why
                child.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
                child.stdin.close()
            for line in child.stdout:
                said = json.loads(line)
                if "memories" in said:
                    on_page(int(said["memories"]))
                elif "done" in said:
                    done = said["done"]
            code = child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            on_start(None)
        errors.seek(0)
        lines = errors.read().decode("utf-8", "replace").strip().splitlines()
    reason = lines[-1][:300] if lines else "no message"
    if code == 0 and done is not None:
        return done
    if code == UNREACHABLE:
        raise HubUnreachable(reason)
    if code == REFUSED:
        raise ReplicaError(reason)
    ending = f"signal {-code}" if code < 0 else f"exit code {code}"
    raise ReplicaError(f"the replica's build process ended with {ending}: {reason}")


def _build_here(request: dict[str, Any]) -> dict[str, Any]:
    """The child's work (see the module's docstring); prints its progress and returns what it stands at."""
    from layers.common.fsutil import sync_tree

    hub = request["hub"]
    client = HubClient(str(hub["url"]), str(hub["key"]), float(hub["timeout_s"]))
    target, size = Path(request["target"]), int(request.get("page") or PAGE)
    page = ask(client, SNAPSHOT_PATH, {"limit": size})
    model = page.get("model") or {}
    dim = int(model.get("dim") or 0)
    if dim <= 0:
        raise ReplicaError("the hub's snapshot names no vector size")
    epoch, seq = page.get("epoch"), int(page.get("seq") or 0)
    projects: dict[str, list[str]] = {}
    count = 0
    shard = new_shard(target, dim)
    try:
        while True:
            if page.get("epoch") != epoch:
                raise ReplicaError("the hub's epoch changed during the snapshot: it is taken again")
            final = {str(m["id"]): m["memory"] for m in page.get("memories") or []}
            write(shard, final, projects)
            count += len(final)
            print(json.dumps({"memories": count}), flush=True)
            cursor = page.get("cursor")
            if not cursor:
                break
            page = ask(client, SNAPSHOT_PATH, {"cursor": cursor, "limit": size})
        shard.optimize()  # here, in the child: the daemon opens it with its graph built
    finally:
        shard.close()
    store = open_store(target, dim)  # its payload indexes, built on the optimized segment
    store.flush()
    store.close()
    sync_tree(target)  # on the disk whole before the daemon's meta file may name it
    return {"epoch": epoch, "seq": seq, "model": model, "memories": count, "projects": projects}


def main() -> int:
    from layers.conversation.adapters.edge import background_child

    request = json.loads(sys.stdin.readline())
    if not background_child(int(request["parent"])):
        return REFUSED  # the daemon is gone: nobody would open what this builds
    try:
        done = _build_here(request)
    except HubUnreachable as exc:
        print(exc, file=sys.stderr)
        return UNREACHABLE
    except ReplicaError as exc:
        print(exc, file=sys.stderr)
        return REFUSED
    print(json.dumps({"done": done}), flush=True)
    return 0


if __name__ == "__main__":  # python -m daemon.conversation.replica_build, by build() only
    sys.exit(main())
