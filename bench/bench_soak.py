"""Soak: a fleet's steady load for N minutes; does the daemon stay flat (memory, latency, index)?

Issue 51.  Ten agents; per agent a note every 5 s (a line appended to the day's file), an
editor-style save every 10 s (by a rename over the note, vim's backup-rename, into a new
directory: tests/editor_saves.py), an L4 add every 3 s and a search every 2 s, alternating L3 and
L4.  Every minute one row is appended to ``minutes.tsv`` (and ``minutes.jsonl``) in the output
directory, flushed at once: a crash or a Ctrl-C keeps what was measured.  A row holds the
daemon's RSS anonymous and file-mapped apart (/proc/PID/status), its smaps_rollup PSS, CPU
(% of one core over the minute), threads, open fds, p50/p95 of each kind of call over the
minute, the L3 indexes' and the L4 store's sizes on disk, the chunks waiting for vectors, and
how many changes the watcher missed so far (found by a re-check instead: daemon/files/reconcile.py).

The daemon runs with allocation tracing (daemon/common/memtrace.py): every few minutes (5, less in
a short run; ``MEMSTRATA_SOAK_TRACE_MIN``, 0: off) the top 20 lines by growth, since the first
snapshot and since the previous, are written next to the table.  The tracer holds memory of its
own (its first snapshot, a record per live block: "the tracer's own" in each file), which shows
as anonymous RSS: for RSS figures alone, run once with tracing off, or with
``MEMSTRATA_SOAK_TRACE_FRAMES=0``: each file then holds only what native code holds (malloc, SQLite's
page caches), which costs the run nothing measurable.

At the end: RSS slope after the warm-up (MB/hour, anonymous and mapped apart), peak against the
warm-up's median, latency of the last window against the first, the L3 indexes on disk against a
fresh rebuild of the same files (``memstrata reindex --rebuild``), errors, and what is lost: every
L4 write and every note and save must be there, in the index and in git, also after a restart.
Targets (issue 51, over 2 hours): slope <= 10 MB/h, peak <= 1.3x, latency <= 1.2x, index <= 1.5x
a rebuild, 0 errors, 0 lost, 0 missed.  Windows: 10 minutes from 30 minutes of load up (the
issue's form is ``--minutes 120``), a third of the run below.

Then, for runs of 30 minutes or more (``MEMSTRATA_SOAK_AGAIN_MIN``: minutes, 0: off), the same load is run
again for 10 minutes on a daemon started afresh over the same data, and its anonymous RSS is set beside the
soak's end: memory that grows with the data is there again; what grew with time alone is not
(``python -m bench.bench_soak --again DIR`` does it for a soak already run).

Embeddings come from the stand-in HTTP embedder (tests/stand_in_embedder.py), labelled: the real
model's memory is measured by the index benchmark, and here it would turn a 2-core host's CPU
into the model's.  ``MEMSTRATA_SOAK_EMBEDDER=local`` uses the configured local model instead.
On a shared machine the latency ratios are noisy (other processes' load falls on one window
and not the other); the memory figures much less so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil
import yaml

from daemon.front.daemon_client import DaemonClient
from layers.local.storage.index import Filters, open_for_reading
from tests.editor_saves import STYLES, append_note, unique_word
from tests.helpers import FAST, DaemonProcess, file_at_head, init_root, run_cli, token_of, wait_for
from tests.stand_in_embedder import StandInEmbedder

AGENTS = 10
SOAK_AGENTS = ["main", *[f"s{i}" for i in range(1, AGENTS)]]
NOTE_S, SAVE_S, ADD_S, SEARCH_S = 5.0, 10.0, 3.0, 2.0
TRACE_EVERY_MIN = 5
KINDS = ("l4_add", "l3_search", "l4_search")
COLUMNS = [
    "minute",
    "rss_anon_mb",
    "rss_file_mb",
    "rss_shmem_mb",
    "pss_anon_mb",
    "pss_file_mb",
    "cpu_pct",
    "threads",
    "fds",
    *[f"{k}_{q}_ms" for k in KINDS for q in ("p50", "p95")],
    "calls",
    "errors",
    "l3_index_mb",
    "l3_wal_mb",
    "l4_store_mb",
    "waiting_vectors",
    "queued_updates",
    "missed",
    "load1",
]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def _proc_kb(pid: int, name: str, keys: tuple[str, ...]) -> dict[str, float]:
    found: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in keys:
                found[key] = float(value.split()[0]) / 1024 if value.split()[0].isdigit() else 0.0
    return found


def _disk_mb(paths: list[Path], suffixes: tuple[str, ...] = ("", "-wal", "-shm")) -> float:
    """What ``paths`` take on disk (blocks): a directory's files, or an SQLite file with its ``suffixes``."""
    total = 0
    for path in paths:
        if path.is_dir():
            for dirpath, _, files in os.walk(path):
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
        else:
            for suffix in suffixes:
                with contextlib.suppress(OSError):
                    total += Path(f"{path}{suffix}").stat().st_blocks * 512
    return total / 2**20


class Load:
    """The agents' writers and callers; what they wrote, to check nothing was lost."""

    def __init__(self, root: Path, daemon: DaemonProcess, agents: list[str], first: int = 0) -> None:
        self.root = root
        self.daemon = daemon
        self.agents = agents
        self.first = first  # the first step's number: a load run again writes texts of its own
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[tuple[str, float]] = []  # drained by the sampler each minute
        self.all_latencies: dict[str, list[tuple[float, float]]] = defaultdict(list)  # kind → (when, seconds)
        self.errors: list[str] = []
        self.error_count = 0
        self.notes: dict[str, list[tuple[str, str]]] = defaultdict(list)  # agent → (rel, word) of each note
        self.saved: dict[tuple[str, str], str] = {}  # (agent, rel) → the word of its last save
        self.added: dict[str, list[str]] = defaultdict(list)  # agent → texts added to L4
        self.threads: list[threading.Thread] = []

    def workspace(self, agent: str) -> Path:
        return self.root / "workspace" if agent == "main" else self.root / "workspace" / "agents" / f"{agent}-workspace"

    def _every(self, period: float, offset: float, step) -> None:
        """Call ``step(k)`` every ``period`` seconds (a fixed schedule: a slow call does not slow the rate)."""
        start = time.monotonic() + offset
        k = 0
        while not self.stop.wait(max(0.0, start + k * period - time.monotonic())):
            try:
                step(self.first + k)
            except Exception as exc:  # counted and shown: the target is 0
                with self.lock:
                    self.error_count += 1
                    if len(self.errors) < 20:
                        self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            k += 1

    def _files(self, agent: str, index: int) -> None:
        ws = self.workspace(agent)
        base = index * 10_000_000

        def note(k: int) -> None:
            rel = f"memory/{dt.date.today().isoformat()}.md"
            word = unique_word(base + 2 * k, "zn")
            append_note(ws / rel, f"- {word} noted at {time.strftime('%H:%M:%S')}\n")
            with self.lock:
                self.notes[agent].append((rel, word))

        def save(k: int) -> None:
            style = list(STYLES)[k % len(STYLES)]
            (ws / "memory" / "topics").mkdir(exist_ok=True)
            rel = {
                "rename": f"memory/2026-10-{k % 4 + 1:02d}.md",
                "vim": f"memory/topics/topic-{k % 4}.md",
                "new-dir": f"memory/projects/p{k}/notes.md",
            }[style]
            word = unique_word(base + 2 * k + 1, "zs")
            STYLES[style](ws / rel, f"# saved {k}\n\n- {word} saved {style}-style, about the {k % 7} pumps\n")
            with self.lock:
                self.saved[(agent, rel)] = word

        offset = index * 0.37
        self.threads += [
            threading.Thread(target=self._every, args=(NOTE_S, offset, note), daemon=True),
            threading.Thread(target=self._every, args=(SAVE_S, offset + 1.1, save), daemon=True),
        ]

    def _calls(self, agent: str, index: int) -> None:
        client = DaemonClient(self.daemon.socket, timeout=120, token=token_of(self.root, agent))
        client_lock = threading.Lock()  # a caller runs one request at a time (daemon/api/fairness.py)

        def timed(kind: str, call) -> None:
            began = time.perf_counter()
            with client_lock:
                call()
            took = time.perf_counter() - began
            with self.lock:
                self.latencies.append((kind, took))
                self.all_latencies[kind].append((time.monotonic(), took))

        def add(k: int) -> None:
            text = f"{agent} fact {k}: the pump in shed {k} runs on port {7000 + k}, checked by {agent}"
            timed("l4_add", lambda: client.add(agent, text, infer=False))
            with self.lock:
                self.added[agent].append(text)

        def search(k: int) -> None:
            if k % 2:
                timed("l4_search", lambda: client.memory_search(agent, f"which port does the pump in shed {k} use"))
            else:
                timed("l3_search", lambda: client.search(agent, f"pumps saved {k % 7}"))

        offset = index * 0.29
        self.threads += [
            threading.Thread(target=self._every, args=(ADD_S, offset, add), daemon=True),
            threading.Thread(target=self._every, args=(SEARCH_S, offset + 0.5, search), daemon=True),
        ]

    def start(self) -> None:
        for i, agent in enumerate(self.agents):
            self._files(agent, i)
            self._calls(agent, i)
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=150)


class Sampler:
    """One row a minute, appended to the table and flushed at once."""

    def __init__(self, out: Path, daemon: DaemonProcess, load: Load, l3_paths: list[Path], l4_path: Path) -> None:
        self.out = out
        self.daemon = daemon
        self.load = load
        self.l3_paths = l3_paths
        self.l4_path = l4_path
        self.rows: list[dict] = []
        self.proc = psutil.Process(daemon.proc.pid)
        self._cpu = sum(self.proc.cpu_times()[:2])
        self._at = time.monotonic()
        self.tsv = open(out / "minutes.tsv", "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.jsonl = open(out / "minutes.jsonl", "w", encoding="utf-8")  # noqa: SIM115
        self.tsv.write("\t".join(COLUMNS) + "\n")
        self.tsv.flush()
        print("  ".join(f"{c[:9]:>9}" for c in COLUMNS), flush=True)

    def sample(self, minute: int) -> dict:
        pid = self.daemon.proc.pid
        status = _proc_kb(pid, "status", ("RssAnon", "RssFile", "RssShmem", "Threads"))
        rollup = _proc_kb(pid, "smaps_rollup", ("Pss_Anon", "Pss_File"))
        cpu, now = sum(self.proc.cpu_times()[:2]), time.monotonic()
        cpu_pct = 100 * (cpu - self._cpu) / max(1e-9, now - self._at)
        self._cpu, self._at = cpu, now
        with self.load.lock:
            taken, self.load.latencies = self.load.latencies, []
            errors = self.load.error_count
        try:
            agents = self.daemon.status()["agents"]
            waiting = sum(a["index"].get("pending_embeddings", 0) for a in agents)
            queued = sum(a["index"].get("queued_updates", 0) for a in agents)
        except Exception:  # a busy daemon: the row says so rather than stopping the bench
            waiting = queued = -1
        row: dict = {
            "minute": minute,
            "rss_anon_mb": status.get("RssAnon", 0),
            "rss_file_mb": status.get("RssFile", 0),
            "rss_shmem_mb": status.get("RssShmem", 0),
            "pss_anon_mb": rollup.get("Pss_Anon", 0),
            "pss_file_mb": rollup.get("Pss_File", 0),
            "cpu_pct": cpu_pct,
            "threads": int(Path(f"/proc/{pid}/status").read_text().split("Threads:")[1].split()[0]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "calls": len(taken),
            "errors": errors,
            "l3_index_mb": _disk_mb(self.l3_paths),
            "l3_wal_mb": _disk_mb(self.l3_paths, ("-wal",)),
            "l4_store_mb": _disk_mb([self.l4_path]),
            "waiting_vectors": waiting,
            "queued_updates": queued,
            "missed": self.daemon.log().count("the watcher missed"),
            "load1": os.getloadavg()[0],
        }
        for kind in KINDS:
            values = [s for k, s in taken if k == kind]
            row[f"{kind}_p50_ms"] = _pct(values, 0.5) * 1000
            row[f"{kind}_p95_ms"] = _pct(values, 0.95) * 1000
        self.rows.append(row)
        cells = [f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS]
        self.tsv.write("\t".join(cells) + "\n")
        self.tsv.flush()
        self.jsonl.write(json.dumps(row) + "\n")
        self.jsonl.flush()
        print("  ".join(f"{c:>9}" for c in cells), flush=True)
        return row

    def close(self) -> None:
        self.tsv.close()
        self.jsonl.close()


def _slope_mb_per_hour(rows: list[dict], key: str) -> float:
    if len(rows) < 2:
        return float("nan")
    xs = [r["minute"] / 60 for r in rows]
    ys = [r[key] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else float("nan")


def summarize(rows: list[dict], load: Load | None, out: Path) -> list[str]:
    """The end figures from the rows (and the raw latencies, when the load is at hand)."""
    if not rows:
        return ["no minute measured"]
    window = 10 if len(rows) >= 30 else max(1, len(rows) // 3)
    first, after = rows[:window], rows[window:]
    lines = [f"{len(rows)} minute(s) measured; windows of {window} minute(s)"]
    for key in ("rss_anon_mb", "rss_file_mb"):
        base = statistics.median(r[key] for r in first)
        peak = max(r[key] for r in rows)
        slope = _slope_mb_per_hour(after, key)
        lines.append(
            f"{key}: first window median {base:.1f} MB, end {rows[-1][key]:.1f} MB, peak {peak:.1f} MB "
            f"= {peak / base if base else float('nan'):.2f}x (target <= 1.3x); slope after the first window "
            f"{slope:+.1f} MB/h (target <= 10 MB/h for anonymous memory)"
        )
    total = [r["rss_anon_mb"] + r["rss_file_mb"] for r in rows]
    lines.append(
        f"RSS total: peak {max(total):.1f} MB = {max(total) / statistics.median(total[:window]):.2f}x the first window"
    )
    if load is not None and load.all_latencies:
        start = min(t for v in load.all_latencies.values() for t, _ in v)
        end = max(t for v in load.all_latencies.values() for t, _ in v)
        span = window * 60
        for kind in KINDS:
            samples = load.all_latencies.get(kind, [])
            early = [s for t, s in samples if t - start < span]
            late = [s for t, s in samples if end - t < span]
            if early and late:
                p50 = _pct(late, 0.5) / _pct(early, 0.5)
                p95 = _pct(late, 0.95) / _pct(early, 0.95)
                lines.append(
                    f"{kind}: first window p50 {_pct(early, 0.5) * 1000:.1f} ms p95 {_pct(early, 0.95) * 1000:.1f} ms; "
                    f"last p50 {_pct(late, 0.5) * 1000:.1f} ms p95 {_pct(late, 0.95) * 1000:.1f} ms; "
                    f"last/first p50 {p50:.2f}x p95 {p95:.2f}x (target <= 1.2x; noisy on a shared host)"
                )
    lines.append(
        f"L3 indexes {rows[0]['l3_index_mb']:.1f} → {rows[-1]['l3_index_mb']:.1f} MB; "
        f"L4 store {rows[0]['l4_store_mb']:.1f} → {rows[-1]['l4_store_mb']:.1f} MB; "
        f"waiting for vectors at the end {rows[-1]['waiting_vectors']}; changes the watcher missed {rows[-1]['missed']}"
    )
    (out / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def _l4_texts(daemon: DaemonProcess, root: Path, agent: str) -> set[str]:
    texts: set[str] = set()
    cursor = None
    with DaemonClient(daemon.socket, timeout=120, token=token_of(root, agent)) as client:
        while True:
            page = client.get_all(agent, limit=1000, cursor=cursor, show_superseded=True)
            texts.update(m.get("memory", "") for m in page.get("results", []))
            cursor = page.get("next_cursor")
            if not cursor:
                return texts


def check_nothing_lost(daemon: DaemonProcess, load: Load, when: str) -> list[str]:
    """Every L4 write, note and last save: there (in L4; in the index; in git)."""
    lost: list[str] = []
    for agent in load.agents:
        stored = _l4_texts(daemon, load.root, agent)
        missing = [t for t in load.added[agent] if t not in stored]
        if missing:
            lost.append(f"{agent}: {len(missing)} of {len(load.added[agent])} L4 writes missing, e.g. {missing[:2]}")
    readers = {a: open_for_reading(Path(daemon.agent(a)["index"]["path"])) for a in load.agents}
    try:
        for agent in load.agents:
            words = [(rel, w) for rel, w in load.notes[agent]]
            words += [(rel, w) for (a, rel), w in load.saved.items() if a == agent]
            unindexed = [w for _, w in words if not readers[agent].search_text(f'"{w}"', 1, Filters())]
            heads: dict[str, str] = {}
            uncommitted = []
            for rel, w in words:
                if rel not in heads:
                    heads[rel] = file_at_head(load.workspace(agent), rel) or ""
                if w not in heads[rel]:
                    uncommitted.append(w)
            if unindexed or uncommitted:
                lost.append(
                    f"{agent}: of {len(words)} notes and saves {len(unindexed)} not indexed, "
                    f"{len(uncommitted)} not committed, e.g. {(unindexed + uncommitted)[:3]}"
                )
    finally:
        for r in readers.values():
            r.close()
    notes = sum(len(v) for v in load.notes.values())
    adds = sum(len(v) for v in load.added.values())
    print(
        f"{when}: {adds} L4 writes, {notes} notes, {len(load.saved)} files saved: "
        + ("nothing lost" if not lost else "LOST: " + "; ".join(lost)),
        flush=True,
    )
    return lost


def _run(daemon: DaemonProcess, load: Load, sampler: Sampler, minutes: int) -> None:
    """The load for ``minutes``, a row a minute; Ctrl-C ends it early, keeping the minutes measured."""
    load.start()
    began = time.monotonic()
    try:
        for minute in range(1, minutes + 1):
            time.sleep(max(0.0, began + 60 * minute - time.monotonic()))
            if daemon.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {daemon.proc.returncode}")
            sampler.sample(minute)
    except KeyboardInterrupt:
        print("interrupted: the figures of the minutes measured follow", flush=True)
    finally:
        load.finish()


AGAIN_MIN = 10  # the load run again on the restarted daemon, as long as the first window


def load_again(config: Path, agents: list[str], out: Path, minutes: int, env: dict[str, str]) -> list[dict]:
    """The same load for ``minutes`` on a daemon started afresh over the soak's data (its rows in ``out``).

    What tells growth with the data from growth with time: the issue's own check ("restarted over the same
    memories, the daemon settles at the anonymous size it had before").  A daemon that grew only with its
    data is, after this run, near the size the soak ended at; one that leaked is well below it."""
    out.mkdir(parents=True, exist_ok=True)
    root = config.parent
    daemon = DaemonProcess(config, env=env).start()
    load = Load(root, daemon, agents, first=1_000_000)  # new texts, not repeats of the soak's
    sampler = None
    try:
        wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=300, what="the L4 store")
        l3_paths = [Path(daemon.agent(a)["index"]["path"]) for a in agents]
        sampler = Sampler(out, daemon, load, l3_paths, daemon.state_dir / "conversation")
        _run(daemon, load, sampler, minutes)
        return sampler.rows
    finally:
        if sampler is not None:
            sampler.close()
        with contextlib.suppress(Exception):
            daemon.stop(timeout=60)


def compare_again(soak_rows: list[dict], again_rows: list[dict]) -> str:
    """The soak's end against the same load run again afresh over the same data (medians of the last 5 minutes)."""

    def tail(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows[-5:])

    soak_anon, again_anon = tail(soak_rows, "rss_anon_mb"), tail(again_rows, "rss_anon_mb")
    # Latency too: a call as slow afresh over the same data is slowed by the data (more points to scan), not by
    # what the soak's hours left behind.
    latency = "; ".join(
        f"{kind} p50/p95 {tail(soak_rows, f'{kind}_p50_ms'):.1f}/{tail(soak_rows, f'{kind}_p95_ms'):.1f} ms, afresh "
        f"{tail(again_rows, f'{kind}_p50_ms'):.1f}/{tail(again_rows, f'{kind}_p95_ms'):.1f}"
        for kind in KINDS
    )
    return (
        f"restarted over the same data and loaded again for {len(again_rows)} min: anonymous RSS {again_anon:.1f} MB "
        f"(file {tail(again_rows, 'rss_file_mb'):.1f}); the soak's last 5 minutes {soak_anon:.1f} MB (file "
        f"{tail(soak_rows, 'rss_file_mb'):.1f}): {soak_anon - again_anon:+.1f} MB the soak holds beyond what the "
        f"same data and load take afresh (its first window's median: "
        f"{statistics.median(r['rss_anon_mb'] for r in soak_rows[:10]):.1f} MB)\n"
        f"latency, the soak's last 5 minutes against afresh (medians of each minute's): {latency}"
    )


def _settled(daemon: DaemonProcess) -> bool:
    agents = daemon.status()["agents"]
    idle = ("queued_updates", "pending_embeddings")
    return all(not a["pending_commit"] and not any(a["index"].get(k, 0) for k in idle) for a in agents)


def _setup(root: Path, embedder: StandInEmbedder | None) -> tuple[Path, dict[str, str], list[str]]:
    config = init_root(root, **{**FAST, "watch": {"debounce_ms": 300}, "git": {"quiet_period_s": 2, "max_delay_s": 30}})
    agents = SOAK_AGENTS
    for agent in agents[1:]:
        run_cli("agent", "add", agent, config=config)
    env = embedder.configure(config) if embedder is not None else {}
    data = yaml.safe_load(config.read_text())
    data["conversation"].update(enabled=True, backend="embedded")
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return config, env, agents


def soak(minutes: int, out: Path) -> None:
    local_model = os.environ.get("MEMSTRATA_SOAK_EMBEDDER") == "local"
    embedder = None if local_model else StandInEmbedder()
    print(
        f"soak: {AGENTS} agents for {minutes} min; embeddings: "
        f"{'the configured local model' if local_model else 'the stand-in HTTP embedder (labelled)'}; "
        f"output in {out}",
        flush=True,
    )
    root = out / "root"  # kept (the daemon's log, the workspaces): removed by the next run into ``out``
    shutil.rmtree(root, ignore_errors=True)
    config, env, agents = _setup(root, embedder)
    trace_min = os.environ.get("MEMSTRATA_SOAK_TRACE_MIN") or str(max(1, min(TRACE_EVERY_MIN, minutes // 5)))
    if trace_min != "0":  # tracing costs memory of its own: a run for RSS figures alone turns it off
        frames = os.environ.get("MEMSTRATA_SOAK_TRACE_FRAMES", "1")  # 0: the native figures alone, untraced
        env = {**env, "MEMSTRATA_TRACEMALLOC_MIN": trace_min, "MEMSTRATA_TRACEMALLOC_DIR": str(out)}
        env["MEMSTRATA_TRACEMALLOC_FRAMES"] = frames
    daemon = DaemonProcess(config, env=env).start()
    sampler = None
    load = Load(root, daemon, agents)
    try:
        wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=300, what="the L4 store")
        l3_paths = [Path(daemon.agent(a)["index"]["path"]) for a in agents]
        sampler = Sampler(out, daemon, load, l3_paths, daemon.state_dir / "conversation")
        _run(daemon, load, sampler, minutes)
        print("\n".join(summarize(sampler.rows, load, out)), flush=True)
        if load.errors:
            print(f"errors ({load.error_count}): {load.errors[:5]}", flush=True)
        else:
            print("0 errors", flush=True)
        settle_began = time.monotonic()
        wait_for(lambda: _settled(daemon), timeout=900, interval=1, what="the load's last changes settled")
        print(f"settled {time.monotonic() - settle_began:.1f} s after the load stopped", flush=True)
        check_nothing_lost(daemon, load, "after the load")
        before, before_files = _disk_mb(l3_paths), _disk_mb(l3_paths, ("",))
        run_cli("reindex", "--rebuild", "--vectors", config=config)
        wait_for(lambda: _settled(daemon), timeout=900, interval=1, what="the rebuild settled")
        rebuilt, rebuilt_files = _disk_mb(l3_paths), _disk_mb(l3_paths, ("",))
        print(
            f"L3 indexes on disk {before:.2f} MB ({before_files:.2f} MB without their -wal/-shm), after a fresh "
            f"rebuild of the same files {rebuilt:.2f} MB ({rebuilt_files:.2f} MB) = "
            f"{before / rebuilt if rebuilt else float('nan'):.2f}x with the logs, "
            f"{before_files / rebuilt_files if rebuilt_files else float('nan'):.2f}x without (target <= 1.5x; "
            f"each index's write-ahead log stays near 1 MB: layers/common/sqlite_wal.py)",
            flush=True,
        )
        stop_began = time.monotonic()
        code = daemon.stop(timeout=60)
        (out / "daemon-soak.log").write_text(daemon.log(), encoding="utf-8")
        print(f"SIGTERM: stopped in {time.monotonic() - stop_began:.2f} s (exit {code})", flush=True)
        daemon = DaemonProcess(config, env={k: v for k, v in env.items() if "TRACEMALLOC" not in k}).start()
        wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=300, what="the L4 store again")
        load.daemon = daemon
        check_nothing_lost(daemon, load, "after a restart")
        (out / "daemon-restarted.log").write_text(daemon.log(), encoding="utf-8")
        again_min = int(os.environ.get("MEMSTRATA_SOAK_AGAIN_MIN") or (AGAIN_MIN if minutes >= 30 else 0))
        if again_min:
            daemon.stop(timeout=60)
            plain = {k: v for k, v in env.items() if "TRACEMALLOC" not in k}
            again = load_again(config, agents, out / "again", again_min, plain)
            print(compare_again(sampler.rows, again), flush=True)
    finally:
        if sampler is not None:
            sampler.close()
        with contextlib.suppress(Exception):
            daemon.stop(timeout=60)
        if embedder is not None:
            embedder.close()


def again(out: Path, minutes: int = AGAIN_MIN) -> None:
    """``load_again`` on the root a finished soak left in ``out`` (its own table: ``out/again``), compared with
    the soak's rows: for a soak run with code that had no such phase, or to look again."""
    config = out / "root" / "memstrata.yaml"
    soak_rows = [json.loads(line) for line in (out / "minutes.jsonl").read_text().splitlines() if line.strip()]
    data = yaml.safe_load(config.read_text())
    embedder = StandInEmbedder() if (data.get("vectors") or {}).get("backend") == "openai" else None
    try:
        env = embedder.configure(config) if embedder is not None else {}  # the stand-in's new port
        rows = load_again(config, SOAK_AGENTS, out / "again", minutes, env)
        print(compare_again(soak_rows, rows), flush=True)
    finally:
        if embedder is not None:
            embedder.close()


def main(quick: bool = False, minutes: int | None = None) -> None:
    minutes = minutes or (3 if quick else 10)
    out = Path(os.environ.get("MEMSTRATA_SOAK_OUT") or f"/tmp/memstrata-soak-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    soak(minutes, out)


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="the soak's load run again over a finished soak's data")
    parser.add_argument("--again", type=Path, required=True, help="a soak's output directory (MEMSTRATA_SOAK_OUT)")
    parser.add_argument("--minutes", type=int, default=AGAIN_MIN)
    args = parser.parse_args(sys.argv[1:])
    again(args.again, args.minutes)
