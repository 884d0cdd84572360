"""One agent's max-size mem0 adds against another agent's writes, and what one message of an add costs.

Two agents on one daemon (the default configuration: local vectors, embedded L4) with mem0's REST
port.  Printed: what one message of a max-size add (MAX_MESSAGES_PER_ADD one-word messages) costs,
alone; then beta's pairs of writes (two at once, so the second starts patient: the case that waited
a full pause behind a long add) idle, and while alpha sends max-size adds one after another,
as a ratio to idle.  Before the fix a pair took a pause (1 s) more during alpha's adds, and one add
of 2,500 messages took minutes on the seed's machine (~13 ms a message here, linear).
"""

from __future__ import annotations

import socket
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from daemon.common.daemon_limits import MAX_MESSAGES_PER_ADD
from tests.failure_modes.test_one_mem0_add_of_many_messages_never_stalls_another_agent import (
    MaxSizeAdds,
    beta_pair,
    messages,
)
from tests.helpers import DaemonProcess, init_root, run_cli, token_of, wait_for, wait_reachable


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _figures(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"p50 {statistics.median(ms):7.1f} ms  p95 {_pct(ms, 0.95):7.1f} ms  (n={len(ms)})"


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = init_root(root)
        for agent in ("alpha", "beta"):
            run_cli("agent", "add", agent, config=config)
        data = yaml.safe_load(config.read_text())
        data["conversation"]["mem0_api"] = {"enabled": True, "port": port}
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        daemon = DaemonProcess(config).start()
        try:
            wait_reachable(daemon)
            wait_for(
                lambda: all(not (a.get("index") or {}).get("pending_embeddings") for a in daemon.status()["agents"]),
                timeout=600,
                what="the L3 vectors built",
            )
            base = f"http://127.0.0.1:{port}"
            alpha = httpx.Client(base_url=base, headers={"Authorization": f"Token {token_of(root, 'alpha')}"})
            beta = httpx.Client(base_url=base, headers={"Authorization": f"Token {token_of(root, 'beta')}"})
            alpha.timeout = beta.timeout = httpx.Timeout(600)
            alpha.post("/v3/memories/add/", json={"messages": "warm up"})
            started = time.perf_counter()
            alpha.post("/v3/memories/add/", json={"messages": messages(MAX_MESSAGES_PER_ADD, "alone")})
            per_message = (time.perf_counter() - started) / MAX_MESSAGES_PER_ADD
            print(f"one max-size add ({MAX_MESSAGES_PER_ADD} messages), alone: {per_message * 1000:.1f} ms a message")
            samples = 10 if quick else 30
            idle = [beta_pair(beta, n) for n in range(samples)]
            busy: list[float] = []
            with MaxSizeAdds(base, token_of(root, "alpha")) as adds:
                while len(busy) < samples:
                    add = adds.in_flight()
                    took = beta_pair(beta, len(busy) + samples)
                    if add is not None and adds.in_flight() == add:
                        busy.append(took)
            print(f"beta's pair of writes, idle:                       {_figures(idle)}")
            print(f"beta's pair of writes, inside alpha's max-size add: {_figures(busy)}")
            p95 = _pct(busy, 0.95) / _pct(idle, 0.95)
            print(f"  ratio to idle: p95 {p95:.2f}x, p50 {statistics.median(busy) / statistics.median(idle):.2f}x")
            print(f"  alpha's adds meanwhile: {len(adds.statuses)} ({sorted(set(adds.statuses))})")
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
