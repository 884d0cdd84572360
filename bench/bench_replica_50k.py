"""A spoke's replica rebuilt from the hub's snapshot at 50,000 memories (issue 48's last target), on one machine.

Two real daemons, as tests/daemon/api/test_peer_replica.py runs them: the hub (embedded L4, ``fleet.listen``
on 127.0.0.1, agents main and ``a``; project infra with ``a`` and ``spoke-1/b``) and spoke-1 (agents main and
b, ``conversation.backend: hub``, no L3 vectors: no model loaded in it).  spoke-2 (main) is enrolled and never
started: its private memories are on the hub and must never reach spoke-1.

**The memories.**  The fleet bench's hub took 9-12 adds/s through its API one by one, so ``--memories`` (50,000)
are written by the hub's own batch path instead: each write is built as the hub's ``Writes.add`` builds it
(placement, lifetime, trust and source by layers/conversation/policy/rules.py, against the hub's registry), put in
the hub's write-ahead log (its durable queue, as writes queued while its store was away), and the hub's daemon
replays them at its start (daemon/conversation/replay.py: ``ConversationStore.add_batch``, one embedding call of
the daemon's llama.cpp model per batch, one upsert, every id recorded in the change feed before it is written).
The memories, their vectors and feed rows are the hub's, made by its code; only the HTTP request per write is
skipped.  Mixed visibility: public (the hub's main), project infra (the hub's ``a`` and spoke-1/b), private of
spoke-1/main and spoke-1/b (spoke-1's own) and of the hub's main, the hub's ``a`` and spoke-2/main (not spoke-1's).
The model is the limit (a few to some tens of texts a second on a shared 2-core machine), so ``--keep DIR``
keeps both roots and the next run with the same DIR resumes the seeding (write ids are fixed: a write already on
the hub is found by its id, not embedded again) and reuses the seeded hub.

**The rebuild.**  spoke-1 started while the hub is down (no replica yet): its RSS idle.  The hub started: the
spoke's replica thread finds the hub and builds its replica from the snapshot (``/v1/peer/snapshot``, pages of
500 memories with their vectors).  Its RSS (VmRSS, RssAnon, RssFile) sampled every 0.25 s throughout, the
rebuild's own time (``replica.last_rebuild.seconds``), its RSS once done, and its peak (VmHWM, the kernel's high
water mark).  Then the replica's set against the hub's snapshot for spoke-1's key: every id, payload and readers
equal, a sample of vectors equal, and none of the ids spoke-1's agents may not read.

**``--kill``.**  Then spoke-1's daemon SIGKILLed while its build child writes, and started again: the child gone
with it, the replica rebuilt equal to the hub's, one generation left.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

import apsw
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.common.config import load_config
from daemon.conversation.broker import queue_path
from daemon.conversation.feed import feed_path
from daemon.conversation.hub_replica import copied_points, replica_dir
from layers.conversation.adapters.store import NewMemory
from layers.conversation.lifecycle.durable_queue import WriteQueue
from layers.conversation.lifecycle.write_ids import point_id_of
from layers.conversation.policy.registry import load_registry
from layers.conversation.policy.rules import DEFAULT_TYPE, lifetime, place, provenance
from tests.helpers import FAST, DaemonProcess, init_root, registry_of, run_cli, wait_for, wait_reachable

MEMORIES = 50_000
TARGET_S = 300.0
TARGET_MB = 100.0
SPOKE = "spoke-1"
# (writer as the hub names it, visibility, project, share of the memories): spoke-1 may read the first five kinds
KINDS = [
    ("main", "public", None, 0.35),
    ("a", "project", "infra", 0.12),
    ("spoke-1/b", "project", "infra", 0.08),
    ("spoke-1/main", "private", None, 0.10),
    ("spoke-1/b", "private", None, 0.08),
    ("main", "private", None, 0.10),
    ("a", "private", None, 0.07),
    ("spoke-2/main", "private", None, 0.10),
]
SPOKE_READERS = {"main", "b"}

PLACES = ["harbour", "orchard", "lantern", "furnace", "ledger", "compass", "granary", "quarry", "beacon", "vault"]
THINGS = ["backup job", "pager rota", "vpn gateway", "build cache", "invoice run", "wifi password hint", "door code"]
VERBS = ["moves to", "is checked on", "was renamed to", "runs again on", "is owned by", "needs a review on"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "the first of the month", "every second week"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------ the two roots


class Roots:
    """The hub's and spoke-1's roots under ``base`` (made once; a kept ``base`` is reused as it is)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.hub_root, self.spoke_root = base / "hub", base / SPOKE
        self.hub_config, self.spoke_config = self.hub_root / "memstrata.yaml", self.spoke_root / "memstrata.yaml"
        self.key = base / f"{SPOKE}.key"
        if not (base / "ready").exists():
            self._make()

    def _make(self) -> None:
        for path in (self.hub_root, self.spoke_root):
            shutil.rmtree(path, ignore_errors=True)
        port = free_port()
        init_root(self.hub_root, **FAST, fleet={"host": "hub", "listen": f"127.0.0.1:{port}"})
        run_cli("agent", "add", "a", "--project", "infra", config=self.hub_config)
        registry = registry_of(self.hub_root)
        data = yaml.safe_load(registry.read_text())
        data["projects"]["infra"]["members"].append(f"{SPOKE}/b")
        registry.write_text(yaml.safe_dump(data))
        for host, agents in ((SPOKE, ["main", "b"]), ("spoke-2", ["main"])):
            args = [a for agent in agents for a in ("--agent", agent)]
            key = self.key if host == SPOKE else self.base / f"{host}.key"
            run_cli("fleet", "add-host", host, *args, "--key-file", str(key), config=self.hub_config)
        hub = {"url": f"http://127.0.0.1:{port}", "key_file": str(self.key), "timeout_s": 60}
        init_root(
            self.spoke_root,
            **FAST,
            vectors={"backend": "off"},  # no model in the spoke: its RSS is the replica's and the daemon's
            fleet={"host": SPOKE},
            conversation={"backend": "hub", "hub": hub},
        )
        run_cli("agent", "add", "b", config=self.spoke_config)
        (self.base / "ready").write_text("")

    @property
    def url(self) -> str:
        return str(yaml.safe_load(self.spoke_config.read_text())["conversation"]["hub"]["url"])


# ------------------------------------------------------------ the memories, by the hub's batch path


def text_of(i: int, rng: random.Random) -> str:
    place_, thing, verb, day = rng.choice(PLACES), rng.choice(THINGS), rng.choice(VERBS), rng.choice(DAYS)
    return f"note {i}: the {place_} {thing} {verb} {day}, ticket {rng.randrange(10_000)}"


def kind_of(i: int) -> tuple[str, str, str | None]:
    """Memory ``i``'s writer, visibility and project: the KINDS' shares, interleaved."""
    x = (i * 0.6180339887) % 1.0
    for writer, visibility, project, share in KINDS:
        if x < share:
            return writer, visibility, project
        x -= share
    return KINDS[0][:3]


def writes(roots: Roots, count: int) -> list[tuple[str, str, dict]]:
    """``count`` writes built as the hub's ``Writes.add`` builds them (daemon/conversation/writes.py), as logged."""
    config = load_config(roots.hub_config)
    registry = load_registry(registry_of(roots.hub_root))
    rng = random.Random(48)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    out = []
    for i in range(count):
        writer, visibility, project = kind_of(i)
        text = text_of(i, rng)
        placement = place(registry, writer, text, visibility, project)
        created = start + timedelta(seconds=37 * i)
        life = lifetime(DEFAULT_TYPE, config.conversation.retention_days, created)
        trust, source = provenance(False, None, None, False)
        record = NewMemory(
            write_id=f"bench50k-{i:06d}",
            agent_id=writer,
            text=text,
            memory_type=DEFAULT_TYPE,
            visibility=placement.visibility,
            project_id=placement.project_id,
            created_at=created.isoformat(timespec="seconds"),
            expiration_date=life.expiration_date,
            expires_at=life.expires_at,
            trust=trust,
            provenance=source,
        )
        out.append((record.write_id, writer, asdict(record)))
    return out


def on_hub(roots: Roots, planned: list[tuple[str, str, dict]]) -> list[int]:
    """Which of the planned writes the hub holds (their point ids in its change feed; the hub stopped)."""
    path = feed_path(load_config(roots.hub_config).paths.state_dir)
    if not path.exists():
        return []
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        fed = {str(row[0]) for row in db.execute("SELECT memory_id FROM changes")}
    finally:
        db.close()
    return [i for i, (write_id, agent, _) in enumerate(planned) if point_id_of(agent, write_id) in fed]


def seed(roots: Roots, count: int, minutes: float) -> list[int]:
    """The hub's ``count`` memories: queued, then replayed by its daemon, for at most ``minutes`` this run; the
    indexes of those on the hub.

    Resumed when ``--keep`` held an unfinished seeding (only the writes not on the hub are queued again, and the
    time of every run is added up); a seeding the budget cut short leaves the hub with fewer, which is said."""
    spent = roots.base / f"seeding-{count}.json"
    before = json.loads(spent.read_text()) if spent.exists() else {"seconds": 0.0, "runs": 0}
    planned = writes(roots, count)
    held = on_hub(roots, planned)
    if len(held) == count:
        print(f"the hub holds the {count} memories (seeded in {before['seconds']:.0f} s over {before['runs']} run(s))")
        return held
    queue = WriteQueue(queue_path(load_config(roots.hub_config)))
    try:
        there = set(held)
        queue.put_many([w for i, w in enumerate(planned) if i not in there])
    finally:
        queue.close()
    hub = DaemonProcess(roots.hub_config).start()
    started = time.monotonic()
    last = 0.0
    try:
        wait_reachable(hub)
        while time.monotonic() - started < minutes * 60:
            section = hub.status()["conversation"]
            depth = int(section["queue"]["depth"])
            if depth == 0:
                break
            if time.monotonic() - last > 60:
                rate = section["queue"].get("replay_rate_per_s")
                print(f"  seeding: {depth} writes still queued on the hub, replaying at {rate}/s", flush=True)
                last = time.monotonic()
            time.sleep(2)
    finally:
        hub.stop(timeout=300)
    seconds = before["seconds"] + time.monotonic() - started
    spent.write_text(json.dumps({"seconds": round(seconds, 1), "runs": before["runs"] + 1}))
    held = on_hub(roots, planned)
    print(
        f"the hub's memories by its batch path (queued, replayed by its daemon with its llama.cpp model): "
        f"{len(held)} of {count} in {seconds:.0f} s over {before['runs'] + 1} run(s) "
        f"({len(held) / max(seconds, 1e-9):.1f}/s)",
        flush=True,
    )
    return held


# ------------------------------------------------------------ the spoke's resident set


def memory_of(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon, RssFile and VmHWM of ``pid``, in MB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
            found[name] = int(value.split()[0]) / 1024
    return found


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    mine, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in mine and child not in mine}
        mine |= more
        grew = bool(more)
    return sorted(mine - {pid})


def children_rss(pid: int, only: bytes = b"", kind: str = "VmRSS") -> float:
    """The resident sets (``kind``: or their RssAnon) of ``pid``'s descendants (``only``: those whose command
    line holds it), in MB."""
    total = 0.0
    for child in descendants(pid):
        try:
            if only and only not in Path(f"/proc/{child}/cmdline").read_bytes():
                continue
            total += memory_of(child).get(kind, 0.0)
        except (OSError, ValueError):
            continue
    return total


def until(check, timeout: float, interval: float = 1.0):
    """``check()`` until truthy; its value, or None at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    return None


class Sampler:
    """``pid``'s memory every ``interval`` s on a thread, until stopped."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval = pid, interval
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample = {"at": time.monotonic(), **memory_of(self.pid)}
                sample["children"] = children_rss(self.pid)
                sample["children_anon"] = children_rss(self.pid, kind="RssAnon")
                sample["tree"] = sample["VmRSS"] + sample["children"]
                sample["tree_anon"] = sample["RssAnon"] + sample["children_anon"]
                self.samples.append(sample)
            except (OSError, ValueError):
                return
            self._stop.wait(self.interval)

    def peak(self, name: str) -> float:
        return max((s.get(name, 0.0) for s in self.samples), default=float("nan"))


def settled(pid: int, seconds: float = 10.0) -> dict[str, float]:
    """The median of ``seconds`` of samples (a daemon's RSS wobbles by a few MB as its threads wake)."""
    with Sampler(pid, 0.5) as s:
        time.sleep(seconds)
    return {k: statistics.median(x[k] for x in s.samples) for k in ("VmRSS", "RssAnon", "RssFile")}


# ------------------------------------------------------------ the replica against the hub


def _get(url: str, key: str, path: str) -> dict:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return dict(json.loads(answer.read()))


def hub_set(url: str, key: str) -> dict[str, dict]:
    """The hub's snapshot for spoke-1's key: id → {payload, readers, vector}."""
    found: dict[str, dict] = {}
    page = _get(url, key, "/v1/peer/snapshot?limit=1000")
    while True:
        for m in page["memories"]:
            found[m["id"]] = m["memory"]
        if not page.get("cursor"):
            return found
        page = _get(url, key, f"/v1/peer/snapshot?limit=1000&cursor={quote(page['cursor'])}")


def replica_set(spoke_config: Path) -> dict[str, dict]:
    """The spoke's replica (a copy of its current generation, read with the replica's own store code)."""
    root = replica_dir(load_config(spoke_config).paths.state_dir)
    meta = json.loads((root / "meta.json").read_text())
    return {
        memory_id: {"payload": payload, "readers": readers, "vector": vector}
        for memory_id, payload, readers, vector in copied_points(root, meta)
    }


def compare(hub: dict[str, dict], here: dict[str, dict], vectors: int = 200) -> str:
    """The replica against the hub's snapshot: ids, payloads and readers, a sample of vectors, nothing foreign."""
    missing, extra = len(set(hub) - set(here)), len(set(here) - set(hub))
    both = sorted(set(hub) & set(here))
    payloads = sum(1 for i in both if hub[i]["payload"] != here[i]["payload"])
    readers = sum(1 for i in both if sorted(hub[i]["readers"]) != sorted(here[i]["readers"]))
    sample = random.Random(1).sample(both, min(vectors, len(both)))
    vector = sum(
        1 for i in sample if max(abs(a - b) for a, b in zip(hub[i]["vector"], here[i]["vector"], strict=True)) > 1e-6
    )
    foreign = sum(
        1
        for m in here.values()
        if not (
            m["payload"].get("visibility") == "public"
            or (m["payload"].get("visibility") == "project" and m["payload"].get("project_id") == "infra")
            or m["payload"].get("agent_id") in (f"{SPOKE}/main", f"{SPOKE}/b")
        )
    )
    same = not (missing or extra or payloads or readers or vector or foreign)
    return (
        f"{'EQUAL' if same else 'DIFFERENT'}: hub {len(hub)}, replica {len(here)} ({missing} missing, {extra} extra, "
        f"{payloads} payloads and {readers} readers differing, {vector}/{len(sample)} sampled vectors differing, "
        f"{foreign} not spoke-1's to read)"
    )


# ------------------------------------------------------------ the bench


def expected(held: list[int]) -> int:
    """How many of the hub's memories spoke-1's agents may read (public, infra, their own private ones)."""
    return sum(1 for i in held if kind_of(i)[1] != "private" or kind_of(i)[0].startswith(f"{SPOKE}/"))


def _mb(figures: dict[str, float], idle: dict[str, float]) -> str:
    """``VmRSS`` (+ over idle; anon, file) of a sample or a peak, in MB."""
    rss, anon, file = figures["VmRSS"], figures["RssAnon"], figures["RssFile"]
    return (
        f"{rss:.0f} (+{rss - idle['VmRSS']:.0f}; anon {anon:.0f}, +{anon - idle['RssAnon']:.0f}; "
        f"file {file:.0f}, +{file - idle['RssFile']:.0f})"
    )


def peaks(sampler: Sampler) -> dict[str, float]:
    names = ("VmRSS", "RssAnon", "RssFile", "children", "children_anon", "tree", "tree_anon")
    return {name: sampler.peak(name) for name in names}


def rebuild(roots: Roots, held: list[int]) -> None:
    """spoke-1 idle (the hub down), then the hub up: the rebuild, then the replica's index (its optimize)."""
    key = roots.key.read_text().strip()
    shutil.rmtree(replica_dir(load_config(roots.spoke_config).paths.state_dir), ignore_errors=True)
    spoke = DaemonProcess(roots.spoke_config).start()  # the hub is down: no replica yet
    hub = None
    try:
        assert spoke.proc is not None
        pid = spoke.proc.pid
        time.sleep(5)
        idle = settled(pid)
        with Sampler(pid) as during:
            hub = DaemonProcess(roots.hub_config).start()
            wait_reachable(hub)
            ready = time.monotonic()
            replica = wait_for(
                lambda: (r := spoke.status()["conversation"]["replica"]).get("last_rebuild") and r,
                timeout=3600,
                interval=1.0,
                what="spoke-1's replica rebuilt",
            )
            wall = time.monotonic() - ready
        after = settled(pid)
        print(
            f"spoke-1's replica rebuilt from the hub's snapshot: {replica['last_rebuild']['memories']} memories "
            f"(expected {expected(held)} of the hub's {len(held)}) in {replica['last_rebuild']['seconds']} s by its "
            f"own record, {wall:.0f} s from the hub's store answering (target < {TARGET_S:.0f} s at 50,000)",
            flush=True,
        )
        top = peaks(during)
        print(
            f"  spoke-1's RSS in MB (its daemon; no model loaded): idle {_mb(idle, idle)}; peak during the rebuild "
            f"{_mb(top, idle)} ({len(during.samples)} samples, 0.25 s apart; target <= idle + {TARGET_MB:.0f}); "
            f"the build's child process at most {top['children']:.0f} (anon {top['children_anon']:.0f}); the daemon "
            f"and its children at once at most {top['tree']:.0f} (+{top['tree'] - idle['VmRSS']:.0f}; anon "
            f"{top['tree_anon']:.0f}, +{top['tree_anon'] - idle['RssAnon']:.0f}); after it {_mb(after, idle)}",
            flush=True,
        )
        # the generation came optimized from the child: no optimize may follow in the daemon
        time.sleep(15)
        later = children_rss(pid, b"optimize")
        print(f"  an optimize after the rebuild: {'NONE (as built)' if not later else f'one, {later:.0f} MB'}")
        t0 = time.monotonic()
        same = compare(hub_set(roots.url, key), replica_set(roots.spoke_config))
        print(f"  spoke-1's replica against the hub's snapshot for its key: {same} ({time.monotonic() - t0:.0f} s)")
    finally:
        spoke.stop(timeout=120)
        if hub is not None:
            hub.stop(timeout=120)


def killed_mid_rebuild(roots: Roots) -> None:
    """spoke-1's daemon SIGKILLed while its build child is writing, then started again: the child must die with it,
    and the restart must rebuild to the hub's set, leaving one generation (the killed build's part removed)."""
    key = roots.key.read_text().strip()
    replicas = replica_dir(load_config(roots.spoke_config).paths.state_dir)
    shutil.rmtree(replicas, ignore_errors=True)
    hub = DaemonProcess(roots.hub_config).start()
    spoke = None
    try:
        wait_reachable(hub)
        spoke = DaemonProcess(roots.spoke_config).start()
        assert spoke.proc is not None
        pid = spoke.proc.pid

        def builder() -> list[int]:
            return [c for c in descendants(pid) if b"replica_build" in Path(f"/proc/{c}/cmdline").read_bytes()]

        child = wait_for(builder, timeout=120, interval=0.2, what="spoke-1's build child")[0]
        time.sleep(12)
        written = (spoke.status()["conversation"]["replica"].get("rebuilding") or {}).get("memories")
        spoke.signal(signal.SIGKILL)
        spoke.proc.wait()
        time.sleep(2)
        alive = Path(f"/proc/{child}").exists() and b") Z" not in Path(f"/proc/{child}/stat").read_bytes()
        print(
            f"spoke-1's daemon SIGKILLed with its build child at {written} memories: the child alive 2 s later: {alive}"
        )
        spoke = DaemonProcess(roots.spoke_config).start()
        replica = wait_for(
            lambda: (r := spoke.status()["conversation"]["replica"]).get("last_rebuild") and r,
            timeout=3600,
            interval=1.0,
            what="spoke-1's replica rebuilt after the kill",
        )
        left = sorted(p.name for p in replicas.glob("gen-*"))
        print(
            f"  restarted: rebuilt {replica['last_rebuild']['memories']} in {replica['last_rebuild']['seconds']} s; "
            f"generations left {len(left)} (target 1)"
        )
        same = compare(hub_set(roots.url, key), replica_set(roots.spoke_config))
        print(f"  against the hub's snapshot for its key: {same}")
    finally:
        if spoke is not None:
            spoke.stop(timeout=120)
        hub.stop(timeout=120)


def main(
    quick: bool = False,
    memories: int | None = None,
    keep: str | None = None,
    seed_minutes: float = 600,
    kill: bool = False,
) -> None:
    count = memories if memories is not None else (1000 if quick else MEMORIES)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-replica-") as tmp:
        base = Path(keep) if keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        roots = Roots(base)
        held = seed(roots, count, seed_minutes)
        rebuild(roots, held)
        if kill:
            killed_mid_rebuild(roots)
    print(f"replica rebuild bench: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=MEMORIES, help="memories on the hub")
    parser.add_argument("--keep", default=None, help="keep both roots here; a later run reuses (and resumes) them")
    parser.add_argument("--seed-minutes", type=float, default=600, help="give up the seeding after this long")
    parser.add_argument("--kill", action="store_true", help="then SIGKILL the spoke mid-rebuild and start it again")
    args = parser.parse_args()
    main(memories=args.memories, keep=args.keep, seed_minutes=args.seed_minutes, kill=args.kill)
