"""OpenClaw's memory_search through the gateway: the memory-memstrata plugin against memory-core, same workspaces.

One host built with OpenClaw's own commands (tests/plugins/plugin_host.py: onboard, agents add research,
the plugin installed, the gateway on loopback; the model a stand-in, unused here). main and research each
get the same-sized corpus of daily notes. Each query is one ``POST /tools/invoke`` of memory_search, as
an alternating agent, timed at the HTTP client: the gateway's routing and tool policy, the tool, and for
the plugin its Unix-socket round trip to memstrata's daemon. Then the memory slot goes back to memory-core
(memory-memstrata disabled), the gateway restarts, and the same queries run after a warm-up that lets
memory-core build its index. Neither side has an embedding provider here (memstrata's vectors are off,
memory-core finds no API key and says "keyword-only"), so this compares the two full-text paths.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_index import _pct
from tests.corpus import Corpus
from tests.helpers import wait_for
from tests.openclaw_install import installed
from tests.plugins.plugin_host import PluginHost

AGENTS = ("main", "research")


def _queries(corpus: Corpus, n: int) -> list[str]:
    return [f"{corpus.word()} {corpus.word()}" for _ in range(n)]


def _measure(host: PluginHost, queries: list[str]) -> tuple[list[float], int, str]:
    times, hits, provider = [], 0, ""
    for i, query in enumerate(queries):
        started = time.perf_counter()
        status, answer = host.invoke("memory_search", AGENTS[i % 2], {"query": query})
        times.append((time.perf_counter() - started) * 1000)
        assert status == 200 and answer.get("ok"), (status, answer)
        details = answer["result"]["details"]
        hits += len(details.get("results") or [])
        provider = details.get("provider") or provider
    return times, hits, provider


def bench_openclaw_memory(quick: bool) -> None:
    if installed() is None:
        print("skipped: OpenClaw is not installed (make test-deps)")
        return
    files, samples, warmup = (10, 20, 4) if quick else (40, 100, 10)
    corpus = Corpus(seed=49)
    with tempfile.TemporaryDirectory() as tmp:
        host = PluginHost(Path(tmp))
        try:
            started = time.monotonic()
            host.build({"main": "# main\n", "research": "# research\n"})
            print(f"host built in {time.monotonic() - started:.0f} s (onboard, agents add, install, gateway)")
            for agent in AGENTS:
                for rel, text in corpus.documents(files=files, chunks_per_file=10):
                    path = host.workspace(agent) / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            assert host.daemon is not None
            daemon = host.daemon
            wait_for(
                lambda: all(daemon.agent(a)["files"] >= files for a in AGENTS),
                timeout=600,
                interval=0.5,
                what="every note indexed by memstrata",
            )
            queries = _queries(corpus, samples)
            _measure(host, queries[:warmup])
            mine, mine_hits, _ = _measure(host, queries)

            host.run(
                "config",
                "set",
                "--batch-json",
                json.dumps(
                    [
                        {"path": "plugins.slots.memory", "value": "memory-core"},
                        {"path": "plugins.entries.memory-core.enabled", "value": True},
                        {"path": "plugins.entries.memory-memstrata.enabled", "value": False},
                    ]
                ),
            )
            host.stop_gateway()
            host.start_gateway()
            first_started = time.perf_counter()
            _measure(host, queries[:1])
            first = (time.perf_counter() - first_started) * 1000
            _measure(host, queries[1:warmup])
            core, core_hits, core_provider = _measure(host, queries)
        finally:
            host.close()
    load = os.getloadavg()
    per = f"{files} notes × 10 sections per agent, {samples} queries alternating main/research"
    print(f"memory_search through /tools/invoke ({per}):")
    for name, times, hits in (("memory-memstrata", mine, mine_hits), ("memory-core", core, core_hits)):
        print(
            f"  {name:17s} p50 {statistics.median(times):7.1f} ms  p95 {_pct(times, 0.95):7.1f} ms  "
            f"max {max(times):7.1f} ms  ({hits} results in all)"
        )
    print(
        f"  memory-core's first search after the switch (it builds its index): {first:.0f} ms; "
        f"provider {core_provider!r}"
    )
    print(f"  p50 ratio memstrata/memory-core: {statistics.median(mine) / statistics.median(core):.2f}")
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main(quick: bool = False) -> None:
    bench_openclaw_memory(quick)
