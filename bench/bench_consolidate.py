"""Consolidation at 10,000 memories on the embedded store: what is folded, what is kept, undo.

The population (seeded, so every run builds the same one): 75% distinct facts, most of them
near-identical twins of others (the same sentence with another host, port, weekday, date, version,
floor, name or state: "host kestrel-3 serves…" / "host kestrel-4 serves…"), a tenth of them another
fact with a qualifier or a fact of its own added ("… only on Fridays", "…，但 dev 除外",
"…; falcon is down"); 20% near-duplicates of
those facts (the same text re-sent with other punctuation, case or spacing, or restated with a
filler added before or after: "记一下：…", "Note: …", "…, as before", "…（已确认）"); 5% superseded
facts (an older value of a fact, replaced by it through the store's supersede, as
``add --supersedes`` does).  Five agents, three visibilities, four memory types.

Figures: memories valid before and after; distinct facts kept (every one must be: a fact
counts as kept when a memory of its family is still valid and nothing of it was folded into
another family); duplicates folded (%); the time of the run (scan, plan, apply) against a bare
scroll of the same collection with vectors (the floor a run cannot go under); whether the
superseded facts are untouched; undo's time and whether every payload is as before the run.

Vectors are the real model's (multilingual-e5-small, the embedded store's embedder), written
through the store's own batched write.  Embedding 10,000 texts costs ~100 s on two idle cores and
several minutes on a loaded one (the rate is printed), so the vectors are kept in
.cache/bench/consolidate-e5-<size>.npz, keyed by the texts: a second run only writes them.
``--quick`` uses 1,000 memories.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from daemon.common.config import DEFAULT_MODEL_PATH  # noqa: E402
from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings  # noqa: E402
from layers.conversation.consolidation.nightly import consolidate, undo  # noqa: E402
from layers.conversation.consolidation.store_view import StoreFace  # noqa: E402
from layers.local.models.vectors import LocalEmbedder  # noqa: E402

CACHE = REPO / ".cache" / "bench"
AGENTS = ("main", "a", "b", "c", "d")
PLACES = (("private", None), ("private", None), ("private", None), ("public", None), ("project", "infra"))
TYPES = ("fact", "knowledge", "decision", "preference")
HOSTS = ("kestrel", "falcon", "osprey", "heron", "merlin", "harrier", "condor", "raven")
SERVICES = ("billing", "search", "auth", "gateway", "ingest", "reports", "mail", "cache", "metrics", "backup")
PEOPLE = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi")
PEOPLE_ZH = ("张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
WEEKDAYS_ZH = ("周一", "周二", "周三", "周四", "周五")
ENVS = ("staging", "prod", "dev")
DRINKS = ("tea", "coffee", "juice", "water")
PREFIXES = ("记一下：", "Note: ", "备注：", "Reminder: ")
QUALIFIED = (" only on Fridays", "，但 {env} 除外", "; {host} is down", " except in {env}", "，以前在 {host}")
SUFFIXES = ("（已确认）", ", as before", " — confirmed", "，记住", " (checked)")


def _fact(rng: random.Random) -> tuple[str, str]:
    """A fact and its subject (what stays the same when its value changes)."""
    svc, host, n, port = rng.choice(SERVICES), rng.choice(HOSTS), rng.randint(1, 40), rng.randint(5000, 9999)
    person, env = rng.choice(PEOPLE), rng.choice(ENVS)
    kind = rng.randrange(10)
    if kind == 0:
        return f"host {host}-{n} serves the {svc} API on port {port}", f"{svc} API host"
    if kind == 1:
        return f"{svc} 服务部署在 {host}-{n}，端口 {port}", f"{svc} 部署"
    if kind == 2:
        return f"The {svc} sync with {person} moved to {rng.choice(WEEKDAYS)} at {rng.randint(9, 17)}:00", f"{svc} sync"
    if kind == 3:
        return f"{svc} 周会改到{rng.choice(WEEKDAYS_ZH)}下午{rng.randint(1, 5)}点，{host} 组参加", f"{svc} 周会"
    if kind == 4:
        date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return f"release {svc} v{rng.randint(1, 9)}.{rng.randint(0, 30)} is planned for {date}", f"{svc} release"
    if kind == 5:
        return f"{rng.choice(PEOPLE_ZH)} 的工位在 {n} 楼 {rng.randint(1, 80)} 号", "工位"
    if kind == 6:
        drink, other = rng.sample(DRINKS, 2)
        return f"{person} prefers {drink} over {other} during {svc} reviews on {host}", f"{person} drinks"
    if kind == 7:
        state = rng.choice(("enabled", "disabled"))
        return f"the {svc} cache on {host}-{n} is {state} in {env}", f"{svc} cache {host}-{n}"
    if kind == 8:
        return f"{svc} logs are kept in /var/{rng.choice(('log', 'lib'))}/{svc}-{n} on {host}", f"{svc} logs"
    return f"每天跑 {rng.randint(1, 9)} 次 {svc} 备份，保留 {rng.randint(3, 90)} 天，存在 {host}", f"{svc} 备份"


def _restatement(rng: random.Random, text: str) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return text + rng.choice(("。", ".", "!", " "))
    if kind == 1:
        return (text[0].upper() if text[0].islower() else text[0].lower()) + text[1:].replace(" ", "  ", 1)
    if kind == 2:
        return rng.choice(PREFIXES) + text
    return text + rng.choice(SUFFIXES)


def _stale(rng: random.Random, text: str) -> str | None:
    """An older value of ``text``'s fact: its first number changed."""
    numbers = list(re.finditer(r"\d+", text))
    if not numbers:
        return None
    m = rng.choice(numbers)
    value = int(m.group())
    return text[: m.start()] + str(value + rng.randint(1, 3)) + text[m.end() :]


@dataclass
class Population:
    memories: list[tuple[NewMemory, str, str]] = field(default_factory=list)  # record, family, kind
    stale_of: dict[str, str] = field(default_factory=dict)  # stale write id -> the fact's write id


def population(size: int, seed: int = 25) -> Population:
    rng = random.Random(seed)
    n_dups, n_stale = size * 20 // 100, size * 5 // 100
    n_facts = size - n_dups - n_stale
    pop = Population()
    seen: set[str] = set()
    clock = 1_780_000_000
    facts: list[tuple[NewMemory, str]] = []
    while len(facts) < n_facts:
        if facts and rng.random() < 0.1:  # a fact that qualifies another, in its scope: a fact of its own
            base = rng.choice(facts)[0]
            text = base.text + rng.choice(QUALIFIED).format(env=rng.choice(ENVS), host=rng.choice(HOSTS))
            agent, visibility, project, kind = base.agent_id, base.visibility, base.project_id, base.memory_type
        else:
            text, _ = _fact(rng)
            agent, (visibility, project), kind = rng.choice(AGENTS), rng.choice(PLACES), rng.choice(TYPES)
        key = f"{agent}/{visibility}/{kind}/{text}"
        if key in seen:
            continue
        seen.add(key)
        clock += 1
        record = _record(agent, text, kind, visibility, project, clock)
        facts.append((record, record.write_id))
        pop.memories.append((record, record.write_id, "fact"))
    for _ in range(n_dups):
        base, family = rng.choice(facts)
        clock += 1
        text = _restatement(rng, base.text)
        pop.memories.append((_like(base, text, clock), family, "duplicate"))
    made = 0
    while made < n_stale:
        base, family = rng.choice(facts)
        text = _stale(rng, base.text)
        key = f"{base.agent_id}/{base.visibility}/{base.memory_type}/{text}"
        if text is None or key in seen:
            continue
        seen.add(key)
        stale = _like(base, text, base_time(base) - 60)
        pop.memories.append((stale, family, "superseded"))
        pop.stale_of[stale.write_id] = family
        made += 1
    return pop


def base_time(record: NewMemory) -> int:
    return int(datetime.fromisoformat(record.created_at).timestamp())


def _record(agent, text, kind, visibility, project, clock) -> NewMemory:
    created = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(clock))
    return NewMemory(str(uuid.uuid4()), agent, text, kind, visibility, project, created, None, None)


def _like(base: NewMemory, text: str, clock: int) -> NewMemory:
    return _record(base.agent_id, text, base.memory_type, base.visibility, base.project_id, clock)


class CachedEmbedder:
    """The real model, with the vectors of texts it embedded before read from a file (same model, same texts)."""

    def __init__(self, path: Path) -> None:
        self.model = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
        self.model_id = self.model.model_id
        self.path = path
        self.cache: dict[str, np.ndarray] = {}
        if path.is_file():
            data = np.load(path)
            self.cache = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        self.embedded = 0
        self.seconds = 0.0

    def dimension(self) -> int:
        return self.model.dimension()

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        missing = [t for t, k in zip(texts, keys, strict=True) if k not in self.cache]
        if missing:
            started = time.perf_counter()
            for text, vector in zip(missing, self.model.embed_passages(missing), strict=True):
                self.cache[hashlib.sha1(text.encode()).hexdigest()] = vector
            self.seconds += time.perf_counter() - started
            self.embedded += len(missing)
        return np.stack([self.cache[k] for k in keys])

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self.cache)
        np.savez(self.path, keys=np.array(keys), vectors=np.stack([self.cache[k] for k in keys]))


def snapshot(face: StoreFace) -> dict[str, dict]:
    points, cursor = {}, None
    while True:
        page, cursor = face.scan_points(512, cursor, None)
        points.update({p.id: dict(p.payload) for p in page})
        if cursor is None:
            return points


def bare_scroll(face: StoreFace) -> float:
    started, cursor = time.perf_counter(), None
    while True:
        _, cursor = face.scan_points(256, cursor, None)
        if cursor is None:
            return time.perf_counter() - started


def run(size: int) -> None:
    pop = population(size)
    embedder = CachedEmbedder(CACHE / f"consolidate-e5-{size}.npz")
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore(StoreSettings("embedded", Path(tmp) / "l4"), embedder, embedder.dimension())
        store.connect()
        started = time.perf_counter()
        records = [r for r, _, _ in pop.memories]
        ids: dict[str, str] = {}
        for start in range(0, len(records), 100):
            for result in store.add_batch(records[start : start + 100]):
                ids[result.write_id] = result.ids[0]
        write_s = time.perf_counter() - started
        embedder.save()
        rate = f"{embedder.embedded / embedder.seconds:.0f} texts/s" if embedder.seconds else "all from the cache"
        print(
            f"population: {len(records):,} memories written in {write_s:.0f} s "
            f"(real e5 model: {embedder.embedded:,} texts embedded, {rate})"
        )
        by_writes = defaultdict(list)
        for stale, family in pop.stale_of.items():
            by_writes[ids[family]].append(ids[stale])
        for by, olds in by_writes.items():
            store.supersede(olds, by, "2026-12-01T00:00:00+00:00")
        face = StoreFace(store)
        before = snapshot(face)
        scroll_s = min(bare_scroll(face) for _ in range(2))

        started = time.perf_counter()
        report = consolidate(face, execute=True, run_id="bench", save=lambda r: None)
        run_s = time.perf_counter() - started
        after = snapshot(face)

        family_of = {ids[r.write_id]: family for r, family, _ in pop.memories}
        kind_of = {ids[r.write_id]: kind for r, _, kind in pop.memories}
        valid_before = sum(1 for p in before.values() if p.get("state") != "superseded")
        valid = {i for i, p in after.items() if p.get("state") != "superseded"}
        facts = {family_of[i] for i, k in kind_of.items() if k == "fact"}
        kept = {family_of[i] for i in valid if kind_of[i] in ("fact", "duplicate")}
        wrong = [
            (i, p["superseded_by"])
            for i, p in after.items()
            if before[i].get("state") != "superseded"
            and p.get("superseded_by")
            and family_of[i] != family_of.get(p["superseded_by"])
        ]
        duplicates = sum(1 for k in kind_of.values() if k == "duplicate")
        # one memory per family stays: each family's other members are what folding can take
        foldable = sum(1 for k in kind_of.values() if k in ("fact", "duplicate")) - len(facts)
        folded = valid_before - len(valid)
        stale_untouched = all(after[ids[s]] == before[ids[s]] for s in pop.stale_of)
        scanned = report["scanned"]
        print(
            f"consolidate --execute: {run_s:.1f} s for {scanned:,} memories ({scanned / run_s:,.0f}/s; "
            f"a bare scroll with vectors {scroll_s:.1f} s, x{run_s / scroll_s:.1f})"
        )
        print(f"  valid memories: {valid_before:,} before, {len(valid):,} after")
        print(
            f"  distinct facts kept: {len(kept & facts):,} of {len(facts):,}"
            f" ({'all' if kept >= facts else 'NOT ALL'}); folded into another fact: {len(wrong)}"
        )
        print(
            f"  duplicates folded: {folded:,} of {foldable:,} foldable ({folded / max(foldable, 1):.1%}); "
            f"{duplicates:,} near-duplicates written"
        )
        conflicts = sum(1 for c in report["clusters"] if c["kind"] == "conflict")
        print(f"  conflicts flagged (no LLM: reported only): {conflicts:,}; refused: {bool(report['refused'])}")
        print(f"  superseded facts ({len(pop.stale_of):,}) untouched: {stale_untouched}")
        started = time.perf_counter()
        result = undo(face, report, save=lambda r: None)
        undo_s = time.perf_counter() - started
        restored = snapshot(face)
        same = restored.keys() == before.keys() and all(restored[i] == before[i] for i in before)
        print(f"  undo: {undo_s:.1f} s, {result['restored']:,} restored; every payload as before: {same}")
        store.close()


def main(quick: bool = False, size: int | None = None) -> None:
    run(size or (1000 if quick else 10_000))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", type=int)
    args = parser.parse_args()
    main(args.quick, args.size)
