"""One agent's flood against another agent's latency, and what hostile connections cost the daemon.

Two agents on one daemon (the default configuration: local vectors, embedded L4).
Each figure is beta's, against beta's own idle figure measured in the same run:

- L3 search p50/p95 while alpha keeps 300 searches outstanding (300 threads, each
  sending its next search as soon as its last one is answered: the real client,
  which waits Retry-After and tries again when told 429);
- L4 search p50/p95 (a new query each time) while alpha sends 5,000 L4 adds (64 threads);
- the daemon's RSS (idle, and its peak) while four connections without a token
  each declare and send a 100 MB ``POST /v1/memories`` body;
- how long a connection that sends its headers a byte per second stays open.

The ratio is the figure: the daemon promises beta's p95 at most 2x its idle p95
during any one agent's flood.
"""

from __future__ import annotations

import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from tests.corpus import Corpus
from tests.helpers import DaemonProcess, init_root, run_cli, token_of, wait_for, wait_reachable


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _figures(values: list[float]) -> str:
    return f"p50 {statistics.median(values):7.1f} ms  p95 {_pct(values, 0.95):7.1f} ms  (n={len(values)})"


def _ratios(idle: list[float], busy: list[float]) -> str:
    p95 = _pct(busy, 0.95) / _pct(idle, 0.95)
    return f"  ratio to idle: p95 {p95:.2f}x, p50 {statistics.median(busy) / statistics.median(idle):.2f}x"


def _timed(call, samples: int, pause: float = 0.05) -> list[float]:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
        time.sleep(pause)
    return times


class Flood:
    """``threads`` threads calling ``call(i)`` back to back until stopped (or ``total`` calls made)."""

    def __init__(self, call, threads: int, total: int | None = None) -> None:
        self.call, self.total = call, total
        self.outcomes: Counter = Counter()
        self._n = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _next(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or (self.total is not None and self._n >= self.total):
                return None
            self._n += 1
            return self._n

    def _run(self) -> None:
        while (i := self._next()) is not None:
            try:
                self.call(i)
                outcome = "ok"
            except DaemonRequestError as exc:
                outcome = str(exc.status)
            except Exception as exc:
                outcome = type(exc).__name__
            with self._lock:
                self.outcomes[outcome] += 1

    def start(self) -> Flood:
        for t in self._threads:
            t.start()
        return self

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=180)


def _write_corpus(workspace: Path, files: int, seed: int) -> None:
    corpus = Corpus(seed=seed)
    for i, (_, text) in enumerate(corpus.documents(files=files, chunks_per_file=8)):
        (workspace / "memory" / f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}.md").write_text(text)


def bench_search_flood(daemon: DaemonProcess, root: Path, quick: bool) -> None:
    alpha = DaemonClient(daemon.socket, timeout=300, token=token_of(root, "alpha"))
    beta = DaemonClient(daemon.socket, timeout=300, token=token_of(root, "beta"))
    samples = 20 if quick else 60
    words = Corpus(seed=2).words[:50]

    def beta_search() -> None:
        beta.search("beta", f"{words[int(time.time() * 1000) % 50]} qdrant")

    idle = _timed(beta_search, samples)
    flood = Flood(lambda i: alpha.search("alpha", f"{words[i % 50]} memory"), threads=300).start()
    time.sleep(3)  # every flood thread has its request in
    busy = _timed(beta_search, samples)
    flood.stop()
    print(f"L3 search, beta idle:                 {_figures(idle)}")
    print(f"L3 search, beta during alpha's flood: {_figures(busy)}")
    print(_ratios(idle, busy))
    print(f"  alpha's 300 threads: {dict(flood.outcomes)}")


def bench_add_flood(daemon: DaemonProcess, root: Path, quick: bool) -> None:
    alpha = DaemonClient(daemon.socket, timeout=300, token=token_of(root, "alpha"))
    beta = DaemonClient(daemon.socket, timeout=300, token=token_of(root, "beta"))
    for i in range(20):
        beta.add("beta", f"beta's note {i}: qdrant listens on port {6000 + i}")
    samples = 20 if quick else 60
    total = 500 if quick else 5000
    asked = iter(range(10**6))

    def beta_search() -> None:  # a new query each time: none is answered from the last one's embedding
        beta.memory_search("beta", f"which port does qdrant listen on, case {next(asked)}")

    idle = _timed(beta_search, samples)
    flood = Flood(lambda i: alpha.add("alpha", f"alpha's flood note number {i} about deploy {i % 97}"), 64, total)
    started = time.monotonic()
    flood.start()
    time.sleep(2)
    busy: list[float] = []
    while flood.running:  # beta searches for as long as alpha's adds go on
        busy += _timed(beta_search, 1, pause=0.2)
    took = time.monotonic() - started
    flood.stop()
    print(f"L4 search, beta idle:                    {_figures(idle)}")
    print(f"L4 search, beta during alpha's {total:,} adds: {_figures(busy)}")
    print(_ratios(idle, busy))
    print(f"  alpha's adds: {dict(flood.outcomes)} in {took:.0f} s ({total / took:.0f}/s)")


def _status_line(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode(errors="replace") or "the connection closed"


def _huge_post(path: Path, megabytes: int, outcome: list) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(120)
    sock.connect(str(path))
    size = megabytes * 1024 * 1024
    head = f"POST /v1/memories HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    sent = 0
    try:
        sock.sendall(head.encode())
        chunk = b'{"agent": "alpha", "text": "' + b"x" * (1024 * 1024 - 30)
        while sent < size:
            piece = chunk[: min(len(chunk), size - sent)]
            sock.sendall(piece)
            sent += len(piece)
        outcome.append((sent, _status_line(sock.recv(200))))
    except OSError as exc:
        try:
            answer = _status_line(sock.recv(200))
        except OSError:
            answer = "nothing read"
        outcome.append((sent, f"{type(exc).__name__} while sending; the answer: {answer}"))
    finally:
        sock.close()


def bench_hostile_connections(daemon: DaemonProcess) -> None:
    proc = psutil.Process(daemon.proc.pid)
    time.sleep(1)
    idle = proc.memory_info().rss / 2**20
    outcome: list = []
    threads = [threading.Thread(target=_huge_post, args=(daemon.socket, 100, outcome)) for _ in range(4)]
    peak = idle
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, proc.memory_info().rss / 2**20)
        time.sleep(0.05)
    print(
        f"RSS idle {idle:.0f} MB; peak during four 100 MB POSTs without a token {peak:.0f} MB (+{peak - idle:.0f} MB)"
    )
    for sent, first in outcome:
        print(f"  {sent / 2**20:6.1f} MB sent: {first}")

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(daemon.socket))
    sock.settimeout(1.0)
    head = b"GET /v1/status HTTP/1.1\r\nHost: memstrata\r\nX-Slow: " + b"a" * 200
    started = time.monotonic()
    closed = None
    for byte in head:
        if time.monotonic() - started > 60:
            break
        try:
            sock.send(bytes([byte]))
            if sock.recv(1, socket.MSG_PEEK) == b"":  # waits up to a second: a byte a second
                closed = time.monotonic() - started
                break
        except TimeoutError:
            continue
        except OSError:
            closed = time.monotonic() - started
            break
    sock.close()
    print(
        "a byte-a-second header: "
        + (f"closed by the daemon after {closed:.1f} s" if closed is not None else "still open after 60 s")
    )


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = init_root(root, watch={"debounce_ms": 100}, git={"quiet_period_s": 0.3})
        for agent in ("alpha", "beta"):
            run_cli("agent", "add", agent, config=config)
        agents = root / "workspace" / "agents"
        _write_corpus(agents / "alpha-workspace", 20, seed=3)
        _write_corpus(agents / "beta-workspace", 20, seed=4)
        daemon = DaemonProcess(config).start()
        try:
            beta = DaemonClient(daemon.socket, timeout=60, token=token_of(root, "beta"))
            wait_for(lambda: beta.search("beta", "qdrant")["results"], timeout=300, what="beta indexed")
            wait_for(  # idle means idle: every chunk has its vector
                lambda: all(not (a.get("index") or {}).get("pending_embeddings") for a in daemon.status()["agents"]),
                timeout=3600,
                interval=2,
                what="vectors built",
            )
            wait_reachable(daemon)
            bench_search_flood(daemon, root, quick)
            bench_add_flood(daemon, root, quick)
            bench_hostile_connections(daemon)
        finally:
            daemon.stop(timeout=60)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
