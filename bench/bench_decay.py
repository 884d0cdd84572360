"""Does importance (decay by use) cost L4 recall?  The recall set's notes as L4 memories, ranked with and without it.

Every line of the recall set's workspace (``bench/recall_set/``: MEMORY.md and 42 daily notes of
2026-09/10, an operations agent's, mostly Chinese) becomes one L4 memory of one agent, written with
its note's date, its heading before it ("备份: 王磊执行了 restic prune …"), a memory type and an
access count drawn from a seeded generator (types: a third task_log, the rest procedure, decision,
knowledge, fact: decaying and permanent mixed; access counts 0-12, most near 0).  The set's 114
questions are asked through ``ConversationStore.search`` (the real e5 model, a Qdrant Edge shard);
a hit is a returned memory from a gold line.  Measured at three dates (the memories' ages shifted
to match, one payload write each, no re-embedding): a month after the notes (2026-11-30), and
three and six months later, when task logs have faded below the archive floor:

- R@1, R@5 and MRR@10 with ``rank_weight`` 0 (relevance alone: the ranking before decay) and
  with the weights compared (0.1 … 0.5, the default 0.3);
- how many gold memories the cleanup would archive at that date (importance < 0.10): archiving
  hides them (it is its purpose), apart from the ranking's cost.

``--type task_log`` makes every memory a task log (the type that decays fastest after sessions): then
importance follows the notes' dates and how often each was read, nothing else.

Run: ``.venv/bin/python -m bench.bench_decay [--weights 0,0.05,0.3] [--type task_log] [--set untuned]``
(~2 minutes: 180 lines embedded, 114 questions asked per weight and date; ``--set untuned``: the blind
set's notes and 126 questions).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import uuid
from datetime import date, datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall import SETS, load_questions
from daemon.common.config import DEFAULT_MODEL_PATH
from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
from layers.conversation.policy.decay import DecayRules
from layers.conversation.policy.rules import Phase
from layers.local.models.vectors import LocalEmbedder

AGENT = "ops"
PHASES = [Phase("private", "private", owner=AGENT)]
LIMIT = 10
DATES = (date(2026, 11, 30), date(2027, 1, 31), date(2027, 4, 30))
TYPES = (("task_log", 34), ("procedure", 18), ("decision", 16), ("knowledge", 16), ("fact", 16))
MEMORY_DATE = date(2026, 9, 1)  # MEMORY.md: the long-term file, as old as the first note


def memories_of(workspace: Path, seed: int = 13, only: str | None = None) -> list[tuple[str, int, str, date, str, int]]:
    """(file, line, text, its date, type, access count) for every content line of the workspace."""
    rng = random.Random(seed)
    kinds = [only] if only else [kind for kind, weight in TYPES for _ in range(weight)]
    out = []
    for path in sorted(workspace.rglob("*.md")):
        relative = path.relative_to(workspace).as_posix()
        day = date.fromisoformat(path.stem) if path.parent.name == "memory" else MEMORY_DATE
        heading = ""
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            stripped = line.strip()
            if not stripped:
                continue
            if stripped.startswith("#"):
                heading = stripped.lstrip("#").strip()
                continue
            text = stripped.lstrip("-*+ ").strip()
            count = min(12, int(rng.expovariate(0.4)))
            out.append((relative, number, f"{heading}: {text}" if heading else text, day, rng.choice(kinds), count))
    return out


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0,0.02,0.05,0.1,0.3")
    parser.add_argument("--type", dest="only", metavar="KIND", help="every memory of this type (e.g. task_log)")
    parser.add_argument(
        "--set", dest="which", choices=("tuned", "untuned"), default="tuned", help="whose notes and questions"
    )
    args = parser.parse_args(argv)
    set_dir = SETS[args.which]
    weights = [float(w) for w in args.weights.split(",")]
    questions = load_questions(set_dir)
    rows = memories_of(set_dir / "workspace", only=args.only)
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    with tempfile.TemporaryDirectory() as tmp:
        store = ConversationStore(StoreSettings("embedded", Path(tmp) / "l4"), embedder, embedder.dimension())
        store.connect()
        records = [
            NewMemory(
                str(uuid.uuid4()), AGENT, text, kind, "private", None, _iso(datetime.now(timezone.utc)), None, None
            )
            for _, _, text, _, kind, _ in rows
        ]
        ids: list[str] = []
        for start in range(0, len(records), 64):
            ids += [r.ids[0] for r in store.add_batch(records[start : start + 64])]
        where = {memory_id: (row[0], row[1]) for memory_id, row in zip(ids, rows, strict=True)}
        store.record_access(
            {i: (row[5], _iso(datetime.now(timezone.utc))) for i, row in zip(ids, rows, strict=True) if row[5]}
        )
        drawn = args.only or f"{dict(TYPES)} (weights of the draw)"
        print(f"{len(rows)} memories, {len(questions)} questions; types {drawn}")
        for when in DATES:
            real_now = datetime.now(timezone.utc)
            for memory_id, row in zip(ids, rows, strict=True):
                age = when - row[3]
                store._client.set_payload(
                    memory_id, {"valid_from": _iso(real_now - age), "created_at": _iso(real_now - age)}
                )
            rules = DecayRules()
            payloads = store._payloads(ids)
            gold_ids = {
                i for i, (f, n) in where.items() if any(f == g and a <= n <= b for q in questions for g, a, b in q.gold)
            }
            faded = sum(1 for i in gold_ids if rules.archivable(payloads[i], real_now))
            print(f"\nat {when}: {faded} of {len(gold_ids)} gold memories below the archive floor")
            print(f"  {'rank_weight':>11}  {'R@1':>5}  {'R@5':>5}  {'MRR':>5}")
            for weight in weights:
                store.decay = DecayRules(rank_weight=weight)
                r1 = r5 = mrr = 0.0
                for q in questions:
                    found = store.search(q.text, PHASES, limit=LIMIT)
                    rank = next(
                        (
                            n
                            for n, r in enumerate(found, start=1)
                            if any(where[r["id"]][0] == g and a <= where[r["id"]][1] <= b for g, a, b in q.gold)
                        ),
                        None,
                    )
                    r1 += rank == 1
                    r5 += rank is not None and rank <= 5
                    mrr += 1 / rank if rank else 0.0
                n = len(questions)
                print(f"  {weight:>11.2f}  {r1 / n:>5.3f}  {r5 / n:>5.3f}  {mrr / n:>5.3f}")
        store.close()


if __name__ == "__main__":
    main()
