"""SIGKILL during a burst of batched writes on Edge: every acknowledged write is there once, nothing twice.

qdrant-client's local mode committed point by point (a kill mid-batch left 203 points for 200
acknowledged); an Edge batch is one WAL record.  A child process writes batches through the store
and prints each batch's write ids once ``add_batch`` has returned; it is killed mid-burst.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

from layers.conversation.adapters.store import ConversationStore, StoreSettings

WRITER = textwrap.dedent(
    """
    import sys, uuid
    from pathlib import Path
    from daemon.common.config import DEFAULT_MODEL_PATH
    from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
    from layers.local.models.vectors import LocalEmbedder

    e = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    s = ConversationStore(StoreSettings("embedded", Path(sys.argv[1])), e, e.dimension())
    s.connect()
    print("ready", flush=True)
    for b in range(1000):
        batch = [
            NewMemory(f"w-{b}-{i}", "a", f"突发写入 {b}-{i} burst", "knowledge", "private", None,
                      "2026-11-30T00:00:00+00:00", None, None)
            for i in range(25)
        ]
        results = s.add_batch(batch)
        assert all(r.event == "ADD" for r in results), results
        print("acked " + " ".join(m.write_id for m in batch), flush=True)
    """
)


def test_sigkill_mid_burst_keeps_every_acknowledged_write_exactly_once(tmp_path, embedder):
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path / "l4")], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    acked: list[str] = []
    deadline = time.monotonic() + 300
    try:
        assert proc.stdout.readline().strip() == "ready"
        while len(acked) < 100 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "the writer ended early"
            acked += line.split()[1:]
        time.sleep(0.05)  # into the middle of the next batch
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()  # what it acknowledged before dying counts too
        acked += [w for line in rest.splitlines() if line.startswith("acked") for w in line.split()[1:]]
    finally:
        proc.kill()
        proc.wait()
    assert len(acked) >= 100

    s = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, embedder.dimension())
    s.connect()
    try:
        cursor, write_ids = None, []
        while True:
            page, cursor = s._client.scroll(limit=1000, offset=cursor, with_payload=["write_id"])
            write_ids += [h.payload["write_id"] for h in page]
            if cursor is None:
                break
        counts = Counter(write_ids)
        assert not [w for w in acked if counts[w] != 1], "an acknowledged write is missing or doubled"
        assert max(counts.values()) == 1, "a write appears twice"
        assert len(write_ids) % 25 == 0, f"{len(write_ids)} points: a batch was half written"
    finally:
        s.close()
