"""L4 add under 8 concurrent writers: durable (this checkout) against the code before it, same run.

Issue 45 made an add wait for its row in the write-ahead log (a synced, group-committed SQLite
commit) where it used to be answered right after an unsynced Edge upsert.  The targets: add
throughput at least 0.5x and add p95 at most 2x the old code's, measured here side by side:

- baseline: the daemon of another git revision (``MEMSTRATA_BENCH_BASELINE``, default :data:`BEFORE_WAL`,
  the last main before L4 writes were synced: once this landed, ``main`` is the durable code itself),
  checked out into a temporary worktree and run from there;
- durable: the daemon of this checkout.

Each round starts a fresh root for each code (embedded Edge store, 8 agents, the stand-in HTTP
embedder of tests/stand_in_embedder.py, labelled: with the real model the figures would measure
llama.cpp, not the write path), then 8 threads, one agent each (a caller runs one request at a
time: daemon/api/fairness.py), add their memories through the socket API.  Rounds alternate
baseline and durable so drift on a shared machine falls on both.  Printed: adds per second and
per-add p50/p95 of each, and the ratios; nothing is asserted.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from bench.bench_index import _pct
from daemon.front.daemon_client import DaemonClient, DaemonUnavailableError
from tests.helpers import FAST, REPO_ROOT, init_root, run_cli, token_of, wait_for
from tests.stand_in_embedder import StandInEmbedder

WRITERS = 8
# main as it was before the write-ahead log (issue 45): adds answered before anything was synced
BEFORE_WAL = "747fa10f2c0763a89c5e8a2322b79e0e25133b49"
AGENTS = [f"w{i}" for i in range(WRITERS)]


class _Daemon:
    """``memstrata run`` of the code at ``code`` (its own checkout on PYTHONPATH and as the working directory)."""

    def __init__(self, code: Path, config: Path, env: dict[str, str]) -> None:
        self.config = config
        data = yaml.safe_load(config.read_text())
        self.socket = Path(data["paths"]["socket"].replace("{root}", str(config.parent)))
        self.log = config.parent / "daemon.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "daemon", "--config", str(config), "run"],
                cwd=code,
                env={**os.environ, **env, "PYTHONPATH": str(code)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_store(self, token: str) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited: {self.log.read_text()[-2000:]}")
            try:
                with DaemonClient(self.socket, timeout=5, token=token) as client:
                    return bool(client.status()["conversation"]["reachable"])
            except (DaemonUnavailableError, OSError, KeyError):
                return False

        wait_for(up, timeout=120, interval=0.1, what="the store reachable")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _root(base: Path, embedder: StandInEmbedder) -> tuple[Path, dict[str, str]]:
    config = init_root(base, **FAST, vectors={"backend": "off"})
    for agent in AGENTS:
        run_cli("agent", "add", agent, config=config)
    env = embedder.configure(config)
    data = yaml.safe_load(config.read_text())
    data.setdefault("conversation", {}).update(enabled=True, backend="embedded", probe_interval_s=0.5)
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return config, env


def _load(daemon: _Daemon, root: Path, per_writer: int) -> tuple[float, list[float]]:
    """Adds per second over the whole load, and each add's latency (seconds)."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS + 1)

    def writer(agent: str) -> None:
        mine = []
        try:
            with DaemonClient(daemon.socket, timeout=60, token=token_of(root, agent)) as client:
                start.wait()
                for i in range(per_writer):
                    began = time.perf_counter()
                    answer = client.add(agent, f"{agent} 的第 {i} 条记忆: port {6000 + i}, host h{i % 17}")
                    mine.append(time.perf_counter() - began)
                    if answer.get("queued"):
                        raise AssertionError(f"an add was queued: {answer.get('reason')}")
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=writer, args=(agent,)) for agent in AGENTS]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return len(latencies) / elapsed, latencies


def _checkpoints(daemon: _Daemon, root: Path) -> int | None:
    """The store flushes the daemon has made (None for code before the write-ahead log)."""
    with DaemonClient(daemon.socket, timeout=10, token=token_of(root, AGENTS[0])) as client:
        return client.status()["conversation"]["queue"].get("checkpoints")


def _round(code: Path, label: str, per_writer: int, embedder: StandInEmbedder) -> tuple[float, list[float], int]:
    """Adds per second, each add's latency, and the checkpoints made during the load."""
    with tempfile.TemporaryDirectory(prefix=f"bench-l4-{label}-") as tmp:
        root = Path(tmp)
        config, env = _root(root, embedder)
        daemon = _Daemon(code, config, env)
        try:
            daemon.wait_store(token_of(root, AGENTS[0]))
            _load(daemon, root, 3)  # warm: mem0 built, first segment made
            before = _checkpoints(daemon, root)
            rate, latencies = _load(daemon, root, per_writer)
            after = _checkpoints(daemon, root)
            return rate, latencies, (after - before) if after is not None and before is not None else 0
        finally:
            daemon.stop()


def _baseline_checkout(into: Path) -> Path:
    ref = os.environ.get("MEMSTRATA_BENCH_BASELINE", BEFORE_WAL)
    subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(into), ref], check=True)
    return into


def main(quick: bool = False) -> None:
    # long enough (~10 s of load) that the durable code's checkpoints under load (every BUSY_S = 5 s:
    # daemon/conversation/checkpoint.py) fall inside it, not only the idle one after it
    per_writer = 15 if quick else 250
    rounds = 1 if quick else 3
    embedder = StandInEmbedder()
    scratch = Path(tempfile.mkdtemp(prefix="bench-l4-baseline-"))
    baseline = scratch / "code"
    try:
        _baseline_checkout(baseline)
        figures: dict[str, tuple[list[float], list[float]]] = {"baseline": ([], []), "durable": ([], [])}
        checkpoints = 0
        for _ in range(rounds):
            for label, code in (("baseline", baseline), ("durable", REPO_ROOT)):
                rate, latencies, flushes = _round(code, label, per_writer, embedder)
                figures[label][0].append(rate)
                figures[label][1].extend(latencies)
                checkpoints += flushes if label == "durable" else 0
        print(
            f"L4 add, {WRITERS} concurrent writers x {per_writer} adds, {rounds} round(s) each, "
            f"baseline = {os.environ.get('MEMSTRATA_BENCH_BASELINE', BEFORE_WAL)[:12]} (stand-in embedder)"
        )
        summary = {}
        for label, (rates, latencies) in figures.items():
            rate = statistics.median(rates)
            p50, p95 = _pct(latencies, 0.5) * 1000, _pct(latencies, 0.95) * 1000
            summary[label] = (rate, p95)
            print(
                f"  {label:<9} {rate:7.1f} adds/s (rounds {', '.join(f'{r:.0f}' for r in rates)})  "
                f"p50 {p50:6.1f} ms  p95 {p95:6.1f} ms"
            )
        (old_rate, old_p95), (new_rate, new_p95) = summary["baseline"], summary["durable"]
        print(f"  durable: {checkpoints} checkpoint(s) (store flush + log trim) during its {rounds} load(s)")
        print(
            f"  durable / baseline: throughput {new_rate / old_rate:.2f}x (target >= 0.5x), "
            f"p95 {new_p95 / old_p95:.2f}x (target <= 2x)"
        )
    finally:
        embedder.close()
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(baseline)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
