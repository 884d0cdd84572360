"""L3 full-text search time against another commit's, on the same notes, in one run.

Why: a change to the lexical side (stems, term shares, the glossary, the focus line) must not
make ``search(mode="fts")`` slower (issue 29's "fts p95 unchanged").  A figure measured on one
day against a figure measured on another says little on a shared two-core host; this bench
checks the base commit out into a temporary git worktree, writes the scale bench's bilingual
notes once (bench/bench_scale.py), and times both trees in alternating rounds, each in a child
process importing only its own tree's code (its own index format: each tree builds its index).
The current tree also translates with the daemon's dictionary, as the daemon does.

    .venv/bin/python -m bench.bench_fts_against --base 66f422d            # 20,000 and 100,000 chunks
    .venv/bin/python -m bench.bench_fts_against --base 66f422d --sizes 20000 --rounds 10

Prints each tree's p50 / p95 over every round, and now / base as a ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.bench_scale import write_workspace

REPO = Path(__file__).resolve().parent.parent
QUERIES = 40
ROUNDS = 3

# Run in a child with PYTHONPATH set to one tree: builds that tree's index once, then times one round.
_CHILD = r"""
import hashlib, inspect, json, random, sys, time
from pathlib import Path
from layers.local.storage.index import Document, Identity, LocalIndex, rebuild
from layers.local.ranking import hybrid_search as S
ws, index_path, state, words = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4].split(",")
if not index_path.exists():
    docs = []
    for p in sorted((ws / "memory").glob("*.md")):
        data = p.read_bytes()
        docs.append(Document(f"memory/{p.name}", data.decode(), hashlib.sha256(data).hexdigest(), "daily", p.stem))
    rebuild(index_path, Identity(embed_model=""), docs)
translating = "translate" in inspect.signature(S.search).parameters
if translating:
    from daemon.local.dictionary import DictionaryFile
    dictionary = DictionaryFile(state)
    dictionary.ensure()
queries = [" ".join(random.Random(i).sample(words, 2)) for i in range(int(sys.argv[5]))]
ms = []
for q in queries:
    kw = {}
    if translating:
        opened = dictionary.open()
        kw = {"translate": opened.translate} if opened else {}
    with LocalIndex(index_path, Identity(embed_model=""), readonly=True, verify=False) as index:
        t = time.perf_counter()
        S.search(index, q, mode="fts", **kw)
        ms.append((time.perf_counter() - t) * 1000)
    if kw:
        opened.close()
print(json.dumps(ms))
"""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def one_size(chunks: int, base_tree: Path, tmp: Path, rounds: int = ROUNDS) -> dict[str, list[float]]:
    ws = tmp / f"ws-{chunks}"
    words = ",".join(write_workspace(ws, chunks))
    trees = {"base": base_tree, "now": REPO}
    times: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(rounds):  # alternating: a busy moment of the host weighs on both
        for name, tree in trees.items():
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _CHILD,
                    str(ws),
                    str(tmp / f"{name}-{chunks}.sqlite"),
                    str(tmp / "state"),
                    words,
                    str(QUERIES),
                ],
                env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=True,
            )
            times[name] += json.loads(out.stdout.strip().splitlines()[-1])
    return times


def main(base: str, sizes: list[int], rounds: int = ROUNDS) -> None:
    with tempfile.TemporaryDirectory(prefix="memstrata-fts-against-") as tmp_name:
        tmp = Path(tmp_name)
        base_tree = tmp / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base_tree), base], check=True)
        try:
            for chunks in sizes:
                t = one_size(chunks, base_tree, tmp, rounds)
                b50, b95 = statistics.median(t["base"]), _pct(t["base"], 0.95)
                n50, n95 = statistics.median(t["now"]), _pct(t["now"], 0.95)
                print(
                    f"{chunks:,} chunks, {QUERIES} two-word queries x {rounds} rounds, search(mode='fts') in-process: "
                    f"{base} p50 {b50:.1f} / p95 {b95:.1f} ms, now p50 {n50:.1f} / p95 {n95:.1f} ms "
                    f"-> now/base p50 {n50 / b50:.2f}x, p95 {n95 / b95:.2f}x",
                    flush=True,
                )
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)], check=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare with (e.g. 66f422d, before issue 29)")
    parser.add_argument("--sizes", default="20000,100000", help="chunk counts")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="alternating rounds per size (more: a steadier p95)")
    args = parser.parse_args()
    main(args.base, [int(n) for n in args.sizes.split(",")], args.rounds)
