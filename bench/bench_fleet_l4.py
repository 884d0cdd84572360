"""The fleet L4 bench (issue 48's targets) on the three booted hosts of tests/system/fleet.py.

Set up as tests/system/fleet_l4.py does (the README's "Several hosts"): the hub's memstrata.service with
``fleet.listen`` on its fleet address, each spoke enrolled with ``memstrata fleet add-host spoke-N --agent
main --agent ops`` and using the hub (``conversation.backend: hub``, ``timeout_s`` 5, a probe a second).
Phases, each printing counts and ratios (nothing is asserted):

1. **Isolation.**  spoke-2's agents (main, ops) write private memories (one superseded, one updated, so they
   have histories), each with a write_id and a secret word of its own.  From spoke-1, with spoke-1's own key,
   ``--cases`` generated requests to the hub's peer port aimed at them: their ids in get / history / update /
   delete / restore, supersede targets, their write_ids (with and without their text), search and list
   filters naming them or their owners, and ``X-Memstrata-Agent`` headers and body ``agent`` fields naming
   spoke-2's agents (or their spellings).  A leak: a memory of theirs in an answer (its id, or an owner
   ``spoke-2/…``), or a secret word of theirs the attacker never sent; afterwards spoke-2's agents list
   their memories: any changed, gone or added is counted too.
2. **Flaps and a hub SIGKILL.**  Two agents per spoke add a memory every ``--interval`` s (tests/system/l4_driver.py
   records every answer before the next add) while each spoke's link flaps ``--flaps`` times (down 0.5-10 s,
   up 1-5 s, drawn from ``--seed``); halfway, the hub's container is SIGKILLed and booted again.  Links up,
   the queues drained: every acknowledged add (answered with an id, or ``queued``) looked up on the hub
   through its agent's listing: missing, duplicated; unacknowledged ones (an error) that arrived anyway.
   Each spoke's replica (its ``replica/meta.json`` seq sampled every 50 ms by the driver) against the
   hub's feed seq at each link return (the feed's own record of when each row was written; and, as
   before, the seq asked of the hub just after the return, which holds later writes too): seconds until
   the replica reached it; once the queues drained, each replica's memories of the phase equal to the
   hub's snapshot for that spoke (same ids, payloads and readers).  ``--keep DIR``: the returns, cuts,
   timelines, the feed's rows and each host's journal kept there.
3. **Search latency.**  The same ``--queries`` L4 searches by a spoke's agent (through its daemon and the
   hub) and by the hub's own agent (its daemon): p50/p95 inside the host, and the ratio.
4. **The replica.**  (b) Lag with the link up: ``--lag-writes`` public adds by spoke-2/main, each from its
   answer until spoke-1's replica seq reaches the add's seq in the hub's feed (the hosts share one clock).
   (c) Search with the hub away: ``--queries`` searches by spoke-1/main through the hub, then the same
   with spoke-1's link cut (answered from its replica, degraded): p95 of each, their ratio, same top 5.
   (d) ``--rebuild-memories`` (50,000) public memories written on the hub through its API (batches of
   200 adds) until ``--rebuild-budget`` s, then spoke-1's replica removed and rebuilt from the snapshot
   (its daemon restarted): the rebuild's time (scaled to 50k when fewer) and the spoke's RSS against idle
   (measured at 50,000 by bench/bench_replica_50k.py: a difference of a few MB here scales to nothing).

Root only (nspawn, namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fleet import pct
from tests.system import fleet_l4 as l4
from tests.system.fleet import HUB, SPOKES, Fleet
from tests.system.rootfs import ensure_rootfs

FLAPS = 100
CASES = 400
QUERIES = 50
ATTACKER, VICTIM = "spoke-1", "spoke-2"
REBUILD = 50_000
LAG_WRITES = 30
PHASES = ("isolation", "search latency", "flaps and a hub SIGKILL", "replica")


def poll(check, timeout: float, interval: float = 0.5):
    """``check()`` until truthy; its value, or None at the deadline (a bench counts, it does not fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception:  # a host booting, a daemon restarting: asked again
            pass
        time.sleep(interval)
    return None


# ------------------------------------------------------------ 1. isolation


def plant(f: Fleet, tag: str) -> list[dict]:
    """spoke-2's agents' private memories: {id, agent, text, secret, write_id}, some superseded or updated."""
    planted = []
    for agent in l4.SPOKE_AGENTS:
        for i in range(4):
            secret = f"zq{uuid.uuid4().hex[:10]}"
            text = f"{tag} {VICTIM} {agent} private {i}: the cellar code word is {secret}"
            write_id = f"{tag}-{agent}-{i}"
            memory_id = l4.added(f, VICTIM, agent, text, visibility="private", write_id=write_id)
            planted.append(
                {
                    "id": memory_id,
                    "agent": agent,
                    "text": text,
                    "secret": secret,
                    "write_id": write_id,
                }
            )
        first = next(p for p in planted if p["agent"] == agent)
        secret = f"zq{uuid.uuid4().hex[:10]}"
        text = f"{tag} {VICTIM} {agent} private update: the cellar code word is now {secret}"
        l4.call(f, VICTIM, agent, "update", first["id"], text)
        first.update(text=text, old_secret=first["secret"], secret=secret)
        secret = f"zq{uuid.uuid4().hex[:10]}"
        text = f"{tag} {VICTIM} {agent} private, replacing: the attic code word is {secret}"
        second = next(p for p in planted if p["agent"] == agent and p is not first)
        memory_id = l4.added(f, VICTIM, agent, text, visibility="private", supersedes=second["id"])
        planted.append(
            {
                "id": memory_id,
                "agent": agent,
                "text": text,
                "secret": secret,
                "write_id": None,
                "replaces": second["id"],
            }
        )
    return planted


def cases(planted: list[dict], count: int, rng: random.Random) -> list[tuple[str, dict]]:
    """``count`` (kind, request) aimed at ``planted`` from the attacker's own key."""
    own = list(l4.SPOKE_AGENTS)
    hostile = [
        f"{VICTIM}/main",
        f"{VICTIM}/ops",
        f"{VICTIM}/main ",
        f"{VICTIM.upper()}/main",
        "spoke-2\\main",
        f"hub/{VICTIM}/main",
        f"{ATTACKER}/../{VICTIM}/main",
        "main/..",
        "*",
        "admin",
        "%2F",
        "ops main",
    ]
    out: list[tuple[str, dict]] = []

    def req(kind: str, method: str, path: str, body: object = None, agent: str | None = None) -> None:
        out.append((kind, {"method": method, "path": path, "agent": agent or rng.choice(own), "body": body}))

    kinds = [
        "get",
        "history",
        "update",
        "delete",
        "restore",
        "supersede",
        "write_id",
        "write_id_text",
        "search",
        "search_filter",
        "list_filter",
        "delete_all_filter",
        "agent_header",
        "agent_body",
    ]
    while len(out) < count:
        p = rng.choice(planted)
        owner = f"{VICTIM}/{p['agent']}"
        kind = kinds[len(out) % len(kinds)]
        mid = p["id"] if rng.random() < 0.8 else p["id"].upper()
        if kind == "get":
            req(kind, "GET", f"/v1/memories/{mid}")
        elif kind == "history":
            req(kind, "GET", f"/v1/memories/{mid}/history")
        elif kind == "update":
            req(kind, "PUT", f"/v1/memories/{mid}", {"text": f"overwritten by {ATTACKER}"})
        elif kind == "delete":
            req(kind, "DELETE", f"/v1/memories/{mid}")
        elif kind == "restore":
            req(kind, "POST", f"/v1/memories/{p.get('replaces', mid)}/restore", {})
        elif kind == "supersede":
            req(
                kind,
                "POST",
                "/v1/memories",
                {"text": f"{ATTACKER} replaces it {uuid.uuid4().hex[:6]}", "supersedes": p.get("replaces", mid)},
            )
        elif kind == "write_id" and p["write_id"]:
            req(kind, "POST", "/v1/memories", {"text": f"{ATTACKER} same write id", "write_id": p["write_id"]})
        elif kind == "write_id_text" and p["write_id"]:
            req(kind, "POST", "/v1/memories", {"text": p["text"], "write_id": p["write_id"], "visibility": "private"})
        elif kind == "search":
            req(kind, "POST", "/v1/memories/search", {"q": p["text"], "limit": 50})
        elif kind == "search_filter":
            filters = rng.choice(
                [
                    {"agent_id": owner},
                    {"AND": [{"agent_id": owner}]},
                    {"OR": [{"agent_id": owner}, {"visibility": "private"}]},
                    {"agent_id": {"in": [owner, "main"]}},
                    {"id": p["id"]},
                    {"memory": {"contains": p["secret"]}},
                ]
            )
            req(kind, "POST", "/v1/memories/search", {"q": "cellar attic code word", "filters": filters, "limit": 50})
        elif kind == "list_filter":
            filters = json.dumps(rng.choice([{"agent_id": owner}, {"visibility": "private"}, {"id": p["id"]}]))
            from urllib.parse import quote

            req(kind, "GET", f"/v1/memories?limit=1000&filters={quote(filters)}&show_superseded=true")
        elif kind == "delete_all_filter":
            from urllib.parse import quote

            req(kind, "DELETE", f"/v1/memories?filters={quote(json.dumps({'agent_id': owner}))}&agent={quote(owner)}")
        elif kind == "agent_header":
            path = rng.choice([f"/v1/memories/{mid}", "/v1/memories?limit=1000"])
            req(kind, "GET", path, agent=rng.choice([*hostile, p["agent"]]))
        elif kind == "agent_body":
            req(kind, "POST", "/v1/memories/search", {"q": p["text"], "agent": rng.choice(hostile), "limit": 50})
    return out


def leaked(sent: str, answer: dict, planted: list[dict]) -> bool:
    """A memory of theirs in the answer (by id or by owner), or a secret word of theirs the attacker never sent.

    Ids and owners, not texts: a request may carry their text itself (a guessed write_id sent with their
    words), and the attacker's own copy of it is then the attacker's to read; ``sent`` is every request so
    far, this one included."""
    theirs = {p["id"].lower() for p in planted}
    secrets = [w for p in planted for w in (p["secret"], p.get("old_secret")) if w and w not in sent]
    if any(w in answer["body"] for w in secrets):
        return True
    try:
        data = json.loads(answer["body"])
    except ValueError:
        return False
    return any(
        str(m.get("id", "")).lower() in theirs or str(m.get("agent_id", "")).startswith(f"{VICTIM}/")
        for m in _memories(data)
    )


def _memories(data: object):
    """Every JSON object in an answer that names a memory (an ``id``), at any depth."""
    if isinstance(data, dict):
        if "id" in data:
            yield data
        for value in data.values():
            yield from _memories(value)
    elif isinstance(data, list):
        for value in data:
            yield from _memories(value)


def isolation(f: Fleet, count: int, seed: int) -> None:
    tag = f"iso{uuid.uuid4().hex[:6]}"
    planted = plant(f, tag)
    before = {a: {m["id"]: m["memory"] for m in l4.listed(f, VICTIM, a, tag)} for a in l4.SPOKE_AGENTS}
    generated = cases(planted, count, random.Random(seed))
    t0 = time.monotonic()
    answers = l4.peer(f, ATTACKER, [c for _, c in generated])
    took = time.monotonic() - t0
    per: dict[str, Counter] = {}
    leaks = []
    sent = ""
    for (kind, case), answer in zip(generated, answers, strict=True):
        sent += json.dumps(case)
        c = per.setdefault(kind, Counter())
        c["cases"] += 1
        c[f"{answer['status'] // 100}xx"] += 1
        if leaked(sent, answer, planted):
            c["leaks"] += 1
            leaks.append((kind, case, answer["status"], answer["body"][:200]))
    kept = Path(tempfile.gettempdir()) / f"bench-fleet-l4-{tag}.json"  # every request and answer, to look into
    kept.write_text(json.dumps({"planted": planted, "cases": generated, "answers": answers}))
    after = {a: {m["id"]: m["memory"] for m in l4.listed(f, VICTIM, a, tag)} for a in l4.SPOKE_AGENTS}
    changed = sum(1 for a in before for i, text in before[a].items() if after[a].get(i) != text)
    added = sum(len(set(after[a]) - set(before[a])) for a in before)
    total = sum(c["leaks"] for c in per.values())
    print(
        f"isolation: {len(generated)} generated requests from {ATTACKER} with its own key at {len(planted)} private "
        f"memories of {VICTIM}'s agents, in {took:.0f} s; leaks {total} (target 0); their memories changed "
        f"{changed}, gone or added {added + sum(len(set(before[a]) - set(after[a])) for a in before)} (target 0)"
    )
    print(f"  every request and answer: {kept}")
    print(f"  {'kind':<18} {'cases':>5} {'2xx':>5} {'4xx':>5} {'5xx':>5} {'leaks':>5}")
    for kind, c in per.items():
        print(f"  {kind:<18} {c['cases']:>5} {c['2xx']:>5} {c['4xx']:>5} {c['5xx']:>5} {c['leaks']:>5}")
    for kind, case, status, body in leaks[:10]:
        print(f"  LEAK {kind}: {json.dumps(case)[:200]} -> {status} {body}")


# ------------------------------------------------------------ 2. flaps and a hub SIGKILL


def flaps_and_kill(f: Fleet, count: int, seed: int, interval: float, keep: Path | None = None) -> None:
    tag = f"fl{uuid.uuid4().hex[:6]}"
    writers = [(role, agent) for role in SPOKES for agent in l4.SPOKE_AGENTS]
    outs = {w: f"/root/bench-{tag}-{w[1]}.jsonl" for w in writers}
    stop = f"/root/bench-stop-{tag}"
    downs: dict[str, list[float]] = {role: [] for role in SPOKES}
    cuts: dict[str, list[float]] = {role: [] for role in SPOKES}  # wall times each link was cut
    killed: dict[str, float] = {}
    watch_stop, timelines = f"/root/bench-watch-{tag}", dict[str, list]()
    returns: list[tuple[str, float, int | None]] = []  # (spoke, wall time of a link's return, the hub's seq then)

    def returned(role: str, at: float) -> None:
        try:
            returns.append((role, at, l4.hub_seq(f)))
        except Exception:  # the hub down (its SIGKILL): this return is not measured
            returns.append((role, at, None))

    def write(role: str, agent: str) -> None:
        try:
            l4.stream(
                f, role, agent, tag, 1_000_000, outs[(role, agent)], interval=interval, stop_file=stop, timeout=6 * 3600
            )
        except Exception as error:
            print(f"  writer {role}/{agent} ended: {type(error).__name__}: {str(error)[:300]}")

    def flapper(role: str, rng: random.Random) -> None:
        for _ in range(count):
            down = rng.uniform(0.5, 10)
            cuts[role].append(time.time())
            f.cut(role)
            time.sleep(down)
            f.restore(role)
            threading.Thread(target=returned, args=(role, time.time())).start()
            downs[role].append(down)
            time.sleep(rng.uniform(1, 5))

    rng = random.Random(seed)
    threads = [threading.Thread(target=write, args=w) for w in writers]
    flappers = [threading.Thread(target=flapper, args=(r, random.Random(rng.random()))) for r in SPOKES]
    watchers = [watch(f, role, watch_stop, 6 * 3600, timelines) for role in SPOKES]
    started = time.monotonic()
    for t in threads + flappers:
        t.start()
    expected = count * (5.25 + 3)  # the flaps' mean length
    time.sleep(expected / 2)
    t0, killed_at = time.monotonic(), time.time()
    f.kill(HUB)
    time.sleep(2)
    f.boot(HUB)
    back = poll(
        lambda: f.run(HUB, "systemctl", "is-active", "memstrata.service", check=False).stdout.strip() == "active", 300
    )
    killed["back_s"] = time.monotonic() - t0 if back else float("nan")
    for t in flappers:
        t.join()
    flapping = time.monotonic() - started
    for role in SPOKES:
        f.restore(role)
    f.each(lambda role: f.run(role, "touch", stop), SPOKES)
    for t in threads:
        t.join(600)
    t0 = time.monotonic()
    drained = poll(lambda: all(l4.settled(f, role) for role in (*SPOKES, HUB)), 900, interval=1.0)
    drain_s = time.monotonic() - t0
    queues = {role: l4.conversation(f, role)["queue"] for role in SPOKES}
    print(
        f"flaps: {count} per spoke (down {pct(downs[SPOKES[0]], 0.5):.1f} s median, "
        f"{sum(map(sum, downs.values())):.0f} s down in all) over {flapping:.0f} s; "
        f"the hub SIGKILLed halfway, its daemon active again {killed['back_s']:.0f} s after the kill; "
        f"queues {'drained' if drained else 'NOT drained'} "
        f"{drain_s:.0f} s after the last flap"
    )
    totals: Counter = Counter()
    print(
        f"  {'agent':<14} {'adds':>6} {'written':>7} {'queued':>6} {'error':>5} {'on hub':>6} {'missing':>7} "
        f"{'dup':>4} {'err→hub':>7}"
    )
    for role, agent in writers:
        told = l4.answers(f, role, outs[(role, agent)])
        outcomes = Counter(x["outcome"] for x in told)
        acknowledged = [x["text"] for x in told if x["outcome"] in ("written", "queued")]
        errors = {x["text"] for x in told if x["outcome"] == "error"}
        got = poll(lambda role=role, agent=agent: (l4.listed(f, role, agent, tag),), 300)
        on_hub = Counter(x["memory"] for x in (got[0] if got else []))
        missing = sum(1 for t in acknowledged if on_hub[t] == 0)
        dup = sum(n - 1 for n in on_hub.values() if n > 1)
        arrived = sum(1 for t in errors if on_hub[t])
        row = Counter(
            adds=len(told),
            written=outcomes["written"],
            queued=outcomes["queued"],
            error=outcomes["error"],
            on_hub=sum(on_hub.values()),
            missing=missing,
            dup=dup,
            arrived=arrived,
        )
        totals += row
        print(
            f"  {role + '/' + agent:<14} {row['adds']:>6} {row['written']:>7} {row['queued']:>6} {row['error']:>5} "
            f"{row['on_hub']:>6} {row['missing']:>7} {row['dup']:>4} {row['arrived']:>7}"
        )
    ack = totals["written"] + totals["queued"]
    print(
        f"  acknowledged {ack}, on the hub exactly once {ack - totals['missing']}/{ack} "
        f"(missing {totals['missing']}, duplicated {totals['dup']}: target 0 and 0); errors {totals['error']} "
        f"({totals['arrived']} of them on the hub anyway, at most once each)"
    )
    for role, q in queues.items():
        print(
            f"  {role} queue: replayed {q.get('replayed')}, skipped as already written "
            f"{q.get('skipped_already_written')}, set aside {q.get('set_aside')}"
        )
    f.each(lambda role: f.run(role, "touch", watch_stop), SPOKES)
    for t in watchers:
        t.join(300)
    rows = l4.feed_times(f)
    convergence_after_returns(f, returns, timelines, tag, killed_at, rows, cuts)
    if keep is not None:
        record = {"killed_at": killed_at, "returns": returns, "cuts": cuts, "timelines": timelines, "feed": rows}
        kept(f, keep / f"bench-fleet-l4-{tag}", record)


def kept(f: Fleet, prefix: Path, record: dict) -> None:
    """The phase's link returns and cuts, the replicas' timelines and the hub's feed rows (JSON) and each host's
    memstrata journal, kept beside ``prefix`` to look into (a slow return is found by its wall time in both):
    the hosts go with the bench."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.json").write_text(json.dumps(record))
    for role in (HUB, *SPOKES):
        Path(f"{prefix}-{role}.journal").write_text(f.container(role).journal("memstrata.service", 2_000_000))
    print(f"  kept: {prefix}.json and {prefix}-<host>.journal")


# ------------------------------------------------------------ 3. search latency


def search_latency(f: Fleet, queries: int) -> None:
    tag = f"sl{uuid.uuid4().hex[:6]}"
    topics = ["harbour", "orchard", "lantern", "furnace", "ledger", "compass", "granary", "quarry", "beacon", "vault"]
    seed = [
        {
            "agent": "main",
            "op": "add",
            "args": [f"{tag} public note {i}: the {topics[i % 10]} is checked on day {i}"],
            "kwargs": {"visibility": "public"},
        }
        for i in range(60)
    ]
    l4.ops(f, HUB, seed)
    asks = [f"when is the {topics[i % 10]} checked {tag}" for i in range(queries)]
    spoke = l4.ops(f, "spoke-1", [{"agent": "main", "op": "memory_search", "args": [q], "kwargs": {}} for q in asks])
    hub = l4.ops(f, HUB, [{"agent": "main", "op": "memory_search", "args": [q], "kwargs": {}} for q in asks])
    s = [a["elapsed_s"] for a in spoke if a["status"] == 200 and not a["answer"]["degraded"]]
    h = [a["elapsed_s"] for a in hub if a["status"] == 200]
    same = sum(
        1
        for a, b in zip(spoke, hub, strict=True)
        if a["status"] == b["status"] == 200
        and [r["id"] for r in a["answer"]["results"][:5]] == [r["id"] for r in b["answer"]["results"][:5]]
    )
    print(
        f"search latency: {queries} L4 searches by spoke-1/main through the hub: p50 {pct(s, 0.5) * 1000:.0f} ms "
        f"p95 {pct(s, 0.95) * 1000:.0f} ms ({len(s)} answered, not degraded); the same by the hub's main on the hub: "
        f"p50 {pct(h, 0.5) * 1000:.0f} ms p95 {pct(h, 0.95) * 1000:.0f} ms; ratio spoke/hub p50 "
        f"{pct(s, 0.5) / pct(h, 0.5):.2f} p95 {pct(s, 0.95) / pct(h, 0.95):.2f}; same top 5 {same}/{queries}"
    )


# ------------------------------------------------------------ 4. the replica


def rss_mb(f: Fleet, role: str) -> float:
    """The resident set of ``role``'s daemon (memstrata.service's main process), in MB."""
    pid = f.run(role, "systemctl", "show", "-p", "MainPID", "--value", "memstrata.service").stdout.strip()
    for line in f.run(role, "cat", f"/proc/{pid}/status").stdout.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def caught_up(timeline: list, after: float, seq: int) -> float | None:
    """The first wall time at or after ``after`` at which a replica's seq (``[[time, seq], ...]``) was >= ``seq``."""
    current = None
    for at, value in timeline:
        if at <= after:
            current = value
            continue
        if current is not None and current >= seq:
            return after
        if value is not None and value >= seq:
            return at
        current = value
    return after if current is not None and current >= seq else None


def watch(f: Fleet, role: str, stop: str, seconds: float, into: dict) -> threading.Thread:
    """``role``'s replica seq over time (tests/system/l4_driver.py watchmeta) until ``stop`` exists."""

    def run() -> None:
        args = ["watchmeta", "--config", l4.operator.CONFIG, "--seconds", str(seconds), "--stop-file", stop]
        into[role] = json.loads(l4.driver(f, role, *args, timeout=seconds + 120).stdout)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def seq_at(rows: list[tuple[int, float]], at: float) -> int:
    """The hub's feed seq at wall time ``at``: its highest row recorded by then (``rows``: (seq, recorded at))."""
    return max((seq for seq, recorded in rows if recorded <= at), default=0)


def convergence_after_returns(
    f: Fleet,
    returns: list[tuple[str, float, int | None]],
    timelines: dict,
    tag: str,
    killed_at: float,
    rows: list[tuple[int, float]],
    cuts: dict[str, list[float]],
) -> None:
    """(a) each link return (the hub up): seconds until that spoke's replica seq reached the hub's feed seq at the
    moment of the return (the feed's own record of when each row was written), and, as the bench measured it
    before, the seq asked of the hub's status just after the return; then each spoke's set equal to the hub's.

    The seq asked after also holds the writes the hub took while the question went round (the other spoke's,
    this spoke's queue sent at the return): with the link cut again before the replica's next poll, those wait
    for the next return, up to a whole down period (10 s) later, which says nothing of the return measured.
    Each return over 10 s is said with how long its link then stayed up."""

    def up_for(role: str, at: float) -> str:
        following = [c for c in cuts.get(role, []) if c > at]
        return f"link up {min(following) - at:.1f} s" if following else "link up to the end"

    for label, target in (
        ("the hub's feed seq at the return (its record)", lambda at, asked: seq_at(rows, at)),
        ("the hub's seq asked just after the return (its status)", lambda at, asked: asked),
    ):
        times, unknown, slow = [], 0, []
        for role, at, asked in returns:
            reached = None
            if asked is not None:  # the hub answered just after the return: it was up
                reached = caught_up(timelines.get(role) or [], at, target(at, asked))
            if reached is None:
                unknown += 1
                continue
            times.append(reached - at)
            if reached - at > 10:
                slow.append(
                    f"{role} {reached - at:.1f} s ({up_for(role, at)}; returned {at - killed_at:+.0f} s from the "
                    f"hub's kill)"
                )
        within = sum(1 for t in times if t <= 10)
        print(
            f"  replica convergence after each link return, to {label} ({len(returns)} returns; measured: "
            f"{len(times)}, not: {unknown}, the hub down at the return): p50 {pct(times, 0.5):.1f} s, "
            f"p95 {pct(times, 0.95):.1f} s, max {max(times, default=float('nan')):.1f} s; within 10 s "
            f"{within}/{len(times)}"
        )
        if slow:
            print(f"    over 10 s: {'; '.join(slow)}")
    for role in SPOKES:
        t0 = time.monotonic()
        same = poll(lambda role=role: _same_set(f, role, tag), 300, interval=1.0)
        print(
            f"  {role}'s replica = the hub's visible set (same ids and payloads, {len(same or {})} memories of the "
            f"phase) {'after ' + format(time.monotonic() - t0, '.1f') + ' s' if same else 'NOT within 300 s'} "
            f"once the queues had drained"
        )


def _same_set(f: Fleet, role: str, tag: str) -> dict | None:
    hub, here = l4.hub_set(f, role, tag), l4.replica_set(f, role, tag)
    return hub["memories"] if here["memories"] == hub["memories"] else None


def replica_lag(f: Fleet, count: int) -> None:
    """(b) a public write on spoke-2 (its answer's wall time, its seq in the hub's feed) until spoke-1's replica
    seq reaches it (spoke-1's meta file sampled every 50 ms; the hosts share one clock)."""
    tag = f"lag{uuid.uuid4().hex[:6]}"
    stop, timelines = f"/root/bench-stop-{tag}", dict[str, list]()
    watcher = watch(f, SPOKES[0], stop, count * 10 + 120, timelines)
    args = ["lagwrite", "--config", l4.operator.CONFIG, "--agent", "main", "--marker", tag, "--count", str(count)]
    args += ["--interval", "1", "--url", l4.URL, "--key-file", l4.HUB_KEY]
    rows = json.loads(l4.driver(f, SPOKES[1], *args, timeout=count * 30 + 300).stdout)
    time.sleep(5)
    f.run(SPOKES[0], "touch", stop)
    watcher.join()
    lags = []
    for row in rows:
        if row["seq"] is not None:
            reached = caught_up(timelines.get(SPOKES[0]) or [], row["acknowledged_at"], row["seq"])
            if reached is not None:
                lags.append(reached - row["acknowledged_at"])
    print(
        f"replica lag with the link up: {len(rows)} public writes by {SPOKES[1]}/main, each on {SPOKES[0]}'s replica "
        f"(its seq reached) {pct(lags, 0.5):.2f} s median, p95 {pct(lags, 0.95):.2f} s, max "
        f"{max(lags, default=float('nan')):.2f} s after it was answered (target p95 <= 2 s); "
        f"{len(lags)}/{len(rows)} seen"
    )


def replica_search(f: Fleet, queries: int) -> None:
    """(c) the same searches by spoke-1/main through the hub, then with spoke-1's link cut (its replica)."""
    tag = f"rs{uuid.uuid4().hex[:6]}"
    topics = ["harbour", "orchard", "lantern", "furnace", "ledger", "compass", "granary", "quarry", "beacon", "vault"]
    seed = [
        {
            "agent": "main",
            "op": "add",
            "args": [f"{tag} public note {i}: the {topics[i % 10]} is checked on day {i}"],
            "kwargs": {"visibility": "public"},
        }
        for i in range(60)
    ]
    l4.ops(f, HUB, seed)
    seq = l4.hub_seq(f)
    poll(lambda: l4.replica(f, SPOKES[0])["seq"] >= seq, 300)
    asks = [f"when is the {topics[i % 10]} checked {tag}" for i in range(queries)]
    calls = [{"agent": "main", "op": "memory_search", "args": [q], "kwargs": {}} for q in asks]
    hub = l4.ops(f, SPOKES[0], calls)
    f.cut(SPOKES[0])
    try:
        warm = l4.ops(f, SPOKES[0], calls[:1])[0]  # the first degraded search loads the spoke's model
        away = l4.ops(f, SPOKES[0], calls)
    finally:
        f.restore(SPOKES[0])
    h = [a["elapsed_s"] for a in hub if a["status"] == 200 and not a["answer"]["degraded"]]
    r = [
        a["elapsed_s"]
        for a in away
        if a["status"] == 200 and a["answer"]["degraded"] and a["answer"].get("replica_age_s") is not None
    ]
    same = sum(
        1
        for a, b in zip(away, hub, strict=True)
        if a["status"] == b["status"] == 200
        and [x["id"] for x in a["answer"]["results"][:5]] == [x["id"] for x in b["answer"]["results"][:5]]
    )
    print(
        f"search with the hub away: {queries} L4 searches by {SPOKES[0]}/main from its replica (link cut): p50 "
        f"{pct(r, 0.5) * 1000:.0f} ms p95 {pct(r, 0.95) * 1000:.0f} ms ({len(r)} answered degraded with their age; "
        f"the first, loading the model, {warm['elapsed_s']:.1f} s, not counted); the same through the hub: p50 "
        f"{pct(h, 0.5) * 1000:.0f} ms p95 {pct(h, 0.95) * 1000:.0f} ms; ratio replica/hub p95 "
        f"{pct(r, 0.95) / pct(h, 0.95):.2f} (target <= 2); same top 5 {same}/{queries}"
    )


def replica_rebuild(f: Fleet, target: int, budget_s: float) -> None:
    """(d) ``target`` public memories written on the hub (batches of 200 adds, one driver run each, until
    ``budget_s``), then spoke-1's replica rebuilt from the snapshot (its replica removed, the daemon restarted):
    its time and the spoke's RSS against idle (the replica small, before the writes)."""
    tag = f"big{uuid.uuid4().hex[:6]}"
    role = SPOKES[0]
    f.run(role, "systemctl", "restart", "memstrata.service", timeout=240)  # idle: no model loaded by a search
    poll(lambda: l4.replica(f, role)["lag"] == 0, 300, interval=2.0)
    time.sleep(5)
    idle, small = rss_mb(f, role), int(l4.replica(f, role)["memories"] or 0)
    t0, written, i = time.monotonic(), 0, 0
    while written < target and time.monotonic() - t0 < budget_s:
        batch = [
            {
                "agent": "main",
                "op": "add",
                "args": [f"{tag} bulk note {i + k}: crate {i + k} on shelf {(i + k) % 97} holds part {(i + k) * 7}"],
                "kwargs": {"visibility": "public"},
            }
            for k in range(min(200, target - written))
        ]
        answers = l4.ops(f, HUB, batch, timeout=1800)
        written += sum(1 for a in answers if a["status"] == 200)
        i += len(batch)
    rate = written / (time.monotonic() - t0)
    seq = l4.hub_seq(f)
    poll(lambda: l4.replica(f, role)["seq"] >= seq, 900, interval=2.0)
    applied = rss_mb(f, role)
    root = l4.replica_set(f, role, f"{tag}-none")["root"]
    f.run(role, "systemctl", "stop", "memstrata.service", timeout=240)
    f.run(role, "rm", "-rf", root)
    f.run(role, "systemctl", "start", "memstrata.service", timeout=240)
    rebuilt = poll(lambda: (l4.replica(f, role).get("last_rebuild") or {}).get("seconds"), 1800, interval=2.0)
    time.sleep(5)
    done = l4.replica(f, role)
    after = rss_mb(f, role)
    total = int(done.get("memories") or 0)
    scale = 50_000 / total if total else float("nan")
    print(
        f"replica at {total} memories ({written} written on the hub by the API in {time.monotonic() - t0:.0f} s "
        f"phase time, {rate:.1f} adds/s; target 50,000): rebuilt from the snapshot in {rebuilt} s "
        f"(x{scale:.1f} scaled to 50k: {(rebuilt or float('nan')) * scale:.0f} s; target < 300 s); {role}'s daemon "
        f"just restarted, no search yet: RSS idle {idle:.0f} MB ({small} memories in its replica), after the feed "
        f"applied them {applied:.0f} MB, restarted and rebuilt {after:.0f} MB "
        f"(+{after - idle:.0f} MB; RSS does not scale linearly from a few MB: at 50,000, `bench/run.py replica-50k`)"
    )


def replica_phases(f: Fleet, queries: int, lag_writes: int, rebuild_target: int, rebuild_budget_s: float) -> None:
    for run in (
        lambda: replica_lag(f, lag_writes),
        lambda: replica_search(f, queries),
        lambda: replica_rebuild(f, rebuild_target, rebuild_budget_s),
    ):
        try:
            run()
        except Exception as error:  # one measurement that broke is said; the others still run
            print(f"  replica: FAILED: {type(error).__name__}: {str(error)[:1500]}")
            for role in SPOKES:
                f.restore(role)


def main(
    quick: bool = False,
    flap_count: int | None = None,
    case_count: int | None = None,
    queries: int | None = None,
    seed: int = 48,
    interval: float = 1.5,
    only: list[str] | None = None,
    lag_writes: int = LAG_WRITES,
    rebuild_target: int = REBUILD,
    rebuild_budget: float = 3600.0,
    keep: Path | None = None,
) -> None:
    if os.geteuid() != 0 or not shutil.which("systemd-nspawn"):
        print("skipped: root and systemd-nspawn needed (the booted fleet)")
        return
    flap_count = flap_count if flap_count is not None else (10 if quick else FLAPS)
    case_count = case_count if case_count is not None else (100 if quick else CASES)
    queries = queries if queries is not None else (20 if quick else QUERIES)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-l4-") as tmp, Fleet(ensure_rootfs(), Path(tmp)) as fleet:
        l4.setup(fleet)
        poll(lambda: all(l4.conversation(fleet, r)["reachable"] for r in SPOKES), 180)
        print(
            f"fleet booted, installed and enrolled in {time.monotonic() - started:.0f} s; spokes' agents "
            f"{l4.SPOKE_AGENTS}, hub timeout_s {l4.HUB_TIMEOUT_S}, probe {l4.PROBE_S} s, seed {seed}",
            flush=True,
        )
        for phase, run in (
            ("isolation", lambda: isolation(fleet, case_count, seed)),
            ("search latency", lambda: search_latency(fleet, queries)),
            ("flaps and a hub SIGKILL", lambda: flaps_and_kill(fleet, flap_count, seed, interval, keep)),
            ("replica", lambda: replica_phases(fleet, queries, lag_writes, rebuild_target, rebuild_budget)),
        ):
            if only and phase not in only:
                continue
            t0 = time.monotonic()
            try:
                run()
            except Exception as error:  # a phase that broke is said; the others still run
                print(f"{phase}: FAILED: {type(error).__name__}: {str(error)[:1500]}")
                for role in SPOKES:
                    fleet.restore(role)
            print(f"({phase}: {time.monotonic() - t0:.0f} s)", flush=True)
    print(f"fleet L4 bench: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flaps", type=int, default=FLAPS, help="link flaps per spoke")
    parser.add_argument("--cases", type=int, default=CASES, help="isolation: generated requests")
    parser.add_argument("--queries", type=int, default=QUERIES, help="search latency: searches")
    parser.add_argument("--interval", type=float, default=1.5, help="seconds between a writer's adds")
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--lag-writes", type=int, default=LAG_WRITES, help="replica lag: writes")
    parser.add_argument("--rebuild-memories", type=int, default=REBUILD, help="replica rebuild: memories")
    parser.add_argument("--rebuild-budget", type=float, default=3600.0, help="replica rebuild: seconds of writes")
    parser.add_argument("--keep", type=Path, default=None, help="flaps: keep the timelines and journals here")
    parser.add_argument("--only", nargs="*", choices=PHASES, default=None, help="these phases (default: all)")
    args = parser.parse_args()
    main(
        flap_count=args.flaps,
        case_count=args.cases,
        queries=args.queries,
        seed=args.seed,
        interval=args.interval,
        only=args.only,
        lag_writes=args.lag_writes,
        rebuild_target=args.rebuild_memories,
        rebuild_budget=args.rebuild_budget,
        keep=args.keep,
    )
