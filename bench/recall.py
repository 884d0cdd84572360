"""Recall on a bilingual agent-memory dev set, through the real daemon (tests/bench/test_recall_floor.py: the floor).

The set (``bench/recall_set/``) is an operations agent's workspace — MEMORY.md
and two months of daily notes, mostly Chinese with English terms — and
questions in seven kinds, each with the file and line range that answers it.
This runner builds a fresh root, copies the workspace in, starts the real
daemon with the real llama.cpp model, waits until every chunk has its vector,
then asks every question in each search mode and scores the answers:

- a hit is a returned chunk of the gold file whose line range overlaps the gold lines;
- R@1 / R@5: the share of questions with a hit in the first 1 / 5 results;
- MRR: the mean of 1 / rank of the first hit within the first 10 results (0 if none);
- R@5 by session: a result of a gold file in the first 5 (a chat note is one session);
- R@5 by turn: a gold line is the *focus* of one of the first 5 results (the line the answer
  points at, one turn of a chat: a budget of five turns read);
- list items in the first five results: how much text a reader is handed;
- recall within a 200-, 400- and 800-token answer: each question asked again with ``max_tokens``, a gold
  line in a passage or whole section the answer gives; beside it the same share for a BM25 baseline over
  single lines (SQLite FTS5's bm25, one line a row, each carrying its file and section heading, handed
  out best first under the same budget at the same cost: issue 50's "BM25, same header").

Figures are given overall, per kind and per question language, for the whole
set, the dev part (tune on this) and the held-aside third (report only).
A run of ``--mode fts`` alone starts the daemon without vectors: no model is
loaded and nothing waits for embeddings (seconds, not minutes).

    .venv/bin/python bench/recall.py                 # every mode, tables
    .venv/bin/python bench/recall.py --mode hybrid --json
    .venv/bin/python bench/recall.py --set chat --mode fts --misses
    .venv/bin/python bench/recall.py --set chat --mode fts --split dev --budget-misses 400
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.front.daemon_client import DaemonClient
from layers.common.textcost import estimate_tokens
from layers.local.text.tokenizer import terms, tokens
from tests.helpers import FAST, DaemonProcess, init_root, wait_for

BENCH_DIR = Path(__file__).resolve().parent
SET_DIR = BENCH_DIR / "recall_set"  # the set the search was tuned on
#: --set NAME → its directory: the tuned set, one written independently and never tuned on (issue 24),
#: English chat memory (issue 29), cross-lingual questions on the tuned set's workspace written blind
#: to tune on (issue 24: the tuned set answers all of its own), people's conversations in Chinese and
#: English written blind (issue 50: report only, never tuned on), and conversations asked about with time
#: words ("recently" at the time it was said, "yesterday", a changed value, a date only in the note's name),
#: written blind too (issue 50, item 3: report only, never tuned on).
SETS = {
    "tuned": SET_DIR,
    "untuned": BENCH_DIR / "recall_set_untuned",
    "chat": BENCH_DIR / "recall_set_chat",
    "crossling": BENCH_DIR / "recall_set_crossling",
    "people": BENCH_DIR / "recall_set_people",
    "timewords": BENCH_DIR / "recall_set_timewords",
    "timewords-dev": BENCH_DIR / "recall_set_timewords_dev",
}
BILINGUAL_KINDS = ("keyword-en", "keyword-zh", "lookup", "paraphrase-en", "paraphrase-zh", "cross-lingual", "temporal")
CHAT_KINDS = ("single-hop", "multi-hop", "temporal")
PEOPLE_KINDS = ("single-hop", "multi-hop", "temporal", "cross-lingual", "paraphrase")
TIMEWORDS_KINDS = ("recently", "relative", "changed", "dated")
KINDS = BILINGUAL_KINDS + tuple(
    dict.fromkeys(k for k in CHAT_KINDS + PEOPLE_KINDS + TIMEWORDS_KINDS if k not in BILINGUAL_KINDS)
)
LANGS = ("en", "zh")
MODES = ("fts", "vector", "hybrid")
SPLITS = ("all", "dev", "heldout")
LIMIT = 10
BUDGETS = (200, 400, 800)  # each question is asked again with max_tokens: is the answer's line in what it gives?
BUDGET_KEYS = tuple(f"r_{b}tok" for b in BUDGETS)
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
_HEADING = re.compile(r"^#{1,6}\s")
BASELINE = "bm25-lines"  # the budget table's column for the single-line BM25 baseline
EMBED_TIMEOUT_S = 1800  # ~200 chunks; a busy 2-core host embeds a few per second


class SetError(ValueError):
    """The question file does not match the workspace (a gold line moved or is out of range)."""


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    lang: str
    heldout: bool
    text: str
    gold: tuple[tuple[str, int, int], ...]  # (file, first line, last line)
    descriptive: bool = False  # names a thing by description where the note uses its name (issue 24)


@dataclass
class Outcome:
    question: Question
    mode: str
    rank: int | None  # 1-based rank of the first hit, None when none in the first LIMIT
    top: list[str] = field(default_factory=list)  # "path:start-end" of the first results
    returned: int = 0  # how many results the answer had (at most LIMIT): where the list ended
    session_rank: int | None = None  # 1-based rank of the first result from a gold file
    turn_rank: int | None = None  # 1-based rank of the first result whose focus line is a gold line
    items_top5: int = 0  # list items (a chat's turns) in the first five results: how long the chunks read are
    in_budget: dict[int, bool] = field(default_factory=dict)  # max_tokens → a gold line is in what the answer gives
    given: dict[int, list[str]] = field(default_factory=dict)  # max_tokens → "path:first-last" of what it gave


def load_questions(set_dir: Path = SET_DIR) -> list[Question]:
    """Read and check the question file against the workspace it is about."""
    source = set_dir / "questions.yaml"
    workspace = set_dir / "workspace"
    questions = []
    for n, item in enumerate(yaml.safe_load(source.read_text(encoding="utf-8")), start=1):
        where = f"{source}: question {n} ({item.get('id', '?')})"
        if item.get("kind") not in KINDS or item.get("lang") not in LANGS:
            raise SetError(f"{where}: kind must be one of {KINDS}, lang one of {LANGS}")
        gold = []
        for g in item["gold"]:
            path = workspace / g["file"]
            if not path.is_file():
                raise SetError(f"{where}: gold file {g['file']} is not in the workspace")
            lines = path.read_text(encoding="utf-8").splitlines()
            start, end = g["lines"]
            if not 1 <= start <= end <= len(lines):
                raise SetError(f"{where}: lines {start}-{end} outside {g['file']} ({len(lines)} lines)")
            if g.get("anchor") and not any(g["anchor"] in line for line in lines[start - 1 : end]):
                raise SetError(f"{where}: {g['anchor']!r} is no longer on {g['file']}:{start}-{end}")
            gold.append((g["file"], start, end))
        questions.append(
            Question(
                item["id"],
                item["kind"],
                item["lang"],
                bool(item["heldout"]),
                item["question"],
                tuple(gold),
                bool(item.get("descriptive")),
            )
        )
    return questions


def first_hit(question: Question, results: list[dict]) -> int | None:
    for rank, r in enumerate(results, start=1):
        start, end = r["lines"]
        if any(r["path"] == f and start <= g_end and g_start <= end for f, g_start, g_end in question.gold):
            return rank
    return None


def focus_line(result: dict, question: str) -> int | None:
    """The line a result points a reader at: its ``focus`` when the answer has one, else the line of its
    text with the most of the question's tokens (what the snippet is drawn around; None when no line has one)."""
    if "focus" in result:  # the answer says which line (None: none of the question's words is in it)
        return int(result["focus"][0]) if result["focus"] else None
    wanted = set(tokens(question))
    counts = [len(wanted.intersection(tokens(line))) for line in result["text"].splitlines()]
    best = max(counts, default=0)
    return result["lines"][0] + counts.index(best) if best else None


def first_session(question: Question, results: list[dict]) -> int | None:
    gold_files = {f for f, _, _ in question.gold}
    return next((rank for rank, r in enumerate(results, start=1) if r["path"] in gold_files), None)


def first_turn(question: Question, results: list[dict]) -> int | None:
    """Rank of the first result whose focus line (one turn of a chat note) is a gold line: a 5-turn budget
    reads one turn from each of the first five results."""
    for rank, r in enumerate(results, start=1):
        line = focus_line(r, question.text)
        if line is not None and any(r["path"] == f and g_start <= line <= g_end for f, g_start, g_end in question.gold):
            return rank
    return None


def workspace_files(set_dir: Path = SET_DIR) -> list[Path]:
    base = set_dir / "workspace"
    return sorted(p.relative_to(base) for p in base.rglob("*.md"))


class RecallDaemon:
    """A fresh root holding the dev workspace, served by the real daemon with every chunk embedded."""

    def __init__(self, root: Path, set_dir: Path = SET_DIR, vectors: bool = True) -> None:
        self.root = root
        self.set_dir = set_dir
        self.vectors = vectors  # False: full-text only, no model loaded and nothing to wait for (seconds, not minutes)
        self.daemon: DaemonProcess | None = None
        self.client: DaemonClient | None = None
        self.embed_seconds = 0.0
        self.chunks = 0

    def __enter__(self) -> RecallDaemon:
        off = {} if self.vectors else {"vectors": {"backend": "off"}}
        config = init_root(self.root, **FAST, conversation={"enabled": False}, **off)
        workspace = self.root / "workspace"
        for rel in workspace_files(self.set_dir):
            target = workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.set_dir / "workspace" / rel, target)
        started = time.monotonic()
        self.daemon = DaemonProcess(config).start()
        expected = len(workspace_files(self.set_dir))

        def embedded() -> dict | None:
            index = self.daemon.agent("main")["index"]  # type: ignore[union-attr]
            done = index.get("files", 0) >= expected and index.get("chunks", 0) > 0
            if self.vectors:
                done = done and index.get("pending_embeddings", 1) == 0 and index.get("vectors") == index.get("chunks")
            return index if done else None

        what = "every chunk embedded" if self.vectors else "every file indexed"
        index = wait_for(embedded, timeout=EMBED_TIMEOUT_S, interval=1.0 if self.vectors else 0.1, what=what)
        self.embed_seconds = time.monotonic() - started
        self.chunks = index["chunks"]
        self.client = DaemonClient(self.daemon.socket, timeout=120, token=self.daemon.admin_token())
        return self

    def search(self, text: str, mode: str, limit: int = LIMIT, max_tokens: int | None = None) -> dict:
        assert self.client is not None
        return self.client.search("main", text, mode=mode, limit=limit, max_tokens=max_tokens)

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.daemon is not None:
            self.daemon.stop()


def within_budget(question: Question, results: list[dict]) -> bool:
    """A gold line is in what a ``max_tokens`` answer gives: a whole section's lines, or a passage's."""
    for r in results:
        start, end = r["lines"] if r.get("whole") else r["passage"]
        if any(r["path"] == f and start <= g_end and g_start <= end for f, g_start, g_end in question.gold):
            return True
    return False


class LineBaseline:
    """BM25 over single lines of the workspace, each carrying its file and section heading (issue 50).

    One row a non-empty, non-heading line; what is indexed is the file's name (a daily note's date),
    the heading the line is under and the line, as the project's index terms (CJK one character a
    term, English stemmed), so both sides read the same words.  The question's terms are ORed and
    ranked by FTS5's bm25; a budgeted answer hands out lines best first, each costing what a passage
    costs in ``layers/local/ranking/budget.py`` (its ``path:line heading`` header and its text),
    skipping one that does not fit as the search's budget does.
    """

    def __init__(self, set_dir: Path) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE line USING fts5(body, tokenize='ascii')")
        self.rows: list[tuple[str, int, str, str]] = []  # (path, line number, heading, text)
        for rel in workspace_files(set_dir):
            heading = ""
            for n, text in enumerate((set_dir / "workspace" / rel).read_text(encoding="utf-8").splitlines(), 1):
                if _HEADING.match(text):
                    heading = text
                elif text.strip():
                    self.rows.append((str(rel), n, heading, text))
        self.db.executemany(
            "INSERT INTO line(rowid, body) VALUES (?, ?)",
            ((i, " ".join(terms(f"{p} {h} {t}"))) for i, (p, _, h, t) in enumerate(self.rows)),
        )

    def results(self, question: str, limit: int = 200) -> list[dict]:
        wanted = dict.fromkeys(t for t in terms(question) if t.isalnum())
        if not wanted:
            return []
        expression = " OR ".join(f'"{t}"' for t in wanted)
        found = self.db.execute(
            "SELECT rowid FROM line WHERE line MATCH ? ORDER BY bm25(line) LIMIT ?", (expression, limit)
        )
        return [
            {"path": p, "lines": [n, n], "passage": [n, n], "focus": [n, n], "heading": h, "text": t}
            for p, n, h, t in (self.rows[i] for (i,) in found)
        ]

    def budgeted(self, question: str, max_tokens: int) -> list[dict]:
        left, given = max_tokens, []
        for r in self.results(question):
            cost = estimate_tokens(f"{r['path']}:{r['lines'][0]} {r['heading']}\n{r['text']}")
            if cost <= left:
                given.append(r)
                left -= cost
            if left < 10:
                break
        return given


def _spans(results: list[dict]) -> list[str]:
    return [f"{r['path']}:{a}-{b}" for r in results for a, b in [r["lines"] if r.get("whole") else r["passage"]]]


def ask_baseline(baseline: LineBaseline, questions: list[Question]) -> list[Outcome]:
    """The single-line BM25 baseline's outcomes (mode :data:`BASELINE`): its ranks are by line."""
    outcomes = []
    for q in questions:
        results = baseline.results(q.text, LIMIT)
        given = {n: baseline.budgeted(q.text, n) for n in BUDGETS}
        outcomes.append(
            Outcome(
                q,
                BASELINE,
                first_hit(q, results),
                [f"{r['path']}:{r['lines'][0]}" for r in results[:5]],
                len(results),
                session_rank=first_session(q, results),
                turn_rank=first_turn(q, results),
                in_budget={n: within_budget(q, g) for n, g in given.items()},
                given={n: _spans(g) for n, g in given.items()},
            )
        )
    return outcomes


def ask_all(served: RecallDaemon, questions: list[Question], modes: tuple[str, ...]) -> list[Outcome]:
    outcomes = []
    for mode in modes:
        for q in questions:
            answer = served.search(q.text, mode)
            if mode in ("vector", "hybrid") and answer.get("vectors") != "used":
                raise RuntimeError(f"{mode} search did not use vectors: {answer.get('vectors')}")
            results = answer["results"]
            top = [f"{r['path']}:{r['lines'][0]}-{r['lines'][1]}" for r in results[:5]]
            budgeted = {n: served.search(q.text, mode, max_tokens=n)["results"] for n in BUDGETS}
            outcomes.append(
                Outcome(
                    q,
                    mode,
                    first_hit(q, results),
                    top,
                    len(results),
                    session_rank=first_session(q, results),
                    turn_rank=first_turn(q, results),
                    items_top5=sum(1 for r in results[:5] for line in r["text"].splitlines() if _ITEM.match(line)),
                    in_budget={n: within_budget(q, given) for n, given in budgeted.items()},
                    given={n: _spans(given) for n, given in budgeted.items()},
                )
            )
    return outcomes


def _metrics(outcomes: list[Outcome]) -> dict:
    n = len(outcomes)
    if not n:
        empty = ("r1", "r5", "mrr", "returned", "session_r5", "turn_r5", "items_top5", *BUDGET_KEYS)
        return {"n": 0, **dict.fromkeys(empty)}
    ranks = [o.rank for o in outcomes]
    return {
        "session_r5": round(sum(1 for o in outcomes if o.session_rank and o.session_rank <= 5) / n, 3),
        "turn_r5": round(sum(1 for o in outcomes if o.turn_rank and o.turn_rank <= 5) / n, 3),
        "items_top5": round(sum(o.items_top5 for o in outcomes) / n, 1),
        "n": n,
        "r1": round(sum(1 for r in ranks if r == 1) / n, 3),
        "r5": round(sum(1 for r in ranks if r and r <= 5) / n, 3),
        "mrr": round(sum(1 / r for r in ranks if r) / n, 3),
        "returned": round(sum(o.returned for o in outcomes) / n, 1),
        **{f"r_{b}tok": round(sum(1 for o in outcomes if o.in_budget.get(b)) / n, 3) for b in BUDGETS},
    }


def score(outcomes: list[Outcome]) -> dict:
    """mode → split → group ("overall", a kind, "lang:en") → metrics."""
    out: dict = {}
    present = {o.question.kind for o in outcomes}
    kinds = [kind for kind in KINDS if kind in present]
    for mode in dict.fromkeys(o.mode for o in outcomes):
        out[mode] = {}
        for split in SPLITS:
            chosen = [
                o for o in outcomes if o.mode == mode and (split == "all" or o.question.heldout == (split == "heldout"))
            ]
            groups = {"overall": chosen}
            groups.update({kind: [o for o in chosen if o.question.kind == kind] for kind in kinds})
            groups.update({f"lang:{lang}": [o for o in chosen if o.question.lang == lang] for lang in LANGS})
            if any(o.question.descriptive for o in chosen):
                groups["descriptive"] = [o for o in chosen if o.question.descriptive]
            out[mode][split] = {name: _metrics(items) for name, items in groups.items()}
    return out


def format_tables(scores: dict) -> str:
    first = next(iter(scores.values()))["all"]
    columns = [c for c in first if first[c]["n"]]  # overall, the set's kinds, languages, descriptive
    lines = []
    for split in SPLITS:
        for metric, label in (
            ("r5", "R@5"),
            ("session_r5", "R@5 by session (a result of a gold file)"),
            ("turn_r5", "R@5 by turn (each result's focus line: a 5-turn budget)"),
            *((f"r_{b}tok", f"recall within a {b}-token answer (max_tokens={b})") for b in BUDGETS),
            ("r1", "R@1"),
            ("mrr", "MRR"),
            ("returned", "results returned"),
            ("items_top5", "list items (turns) in the first five results"),
        ):
            any_mode = next(iter(scores.values()))[split]
            counts = " ".join(f"{c}={any_mode[c]['n']}" for c in columns)
            lines.append(f"\n{label} — {split} ({counts})")
            lines.append("| mode | " + " | ".join(c.removeprefix("lang:") for c in columns) + " |")
            lines.append("|---" * (len(columns) + 1) + "|")
            for mode, by_split in scores.items():
                if mode == BASELINE and metric not in BUDGET_KEYS:
                    continue  # the baseline ranks lines, not chunks: only its budget figures compare
                row = by_split[split]
                cells = ["–" if row[c][metric] is None else f"{row[c][metric]:.2f}" for c in columns]
                lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def budget_table(scores: dict) -> str:
    """Recall within each budget, overall, one row a budget and one column a mode and the baseline (issue 50)."""
    lines = []
    modes = list(scores)
    for split in SPLITS:
        n = scores[modes[0]][split]["overall"]["n"]
        if not n:
            continue
        lines.append(f"\nrecall within a budget, overall — {split} (n={n})")
        lines.append("| tokens | " + " | ".join(modes) + " |")
        lines.append("|---" * (len(modes) + 1) + "|")
        for b in BUDGETS:
            cells = [f"{scores[m][split]['overall'][f'r_{b}tok'] * 100:.1f}" for m in modes]
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(
    modes: tuple[str, ...] = MODES, set_dir: Path = SET_DIR, split: str = "all"
) -> tuple[dict, list[Outcome], dict]:
    """Serve the set, ask every question in ``modes`` (of ``split``: all, dev or heldout), and the single-line
    BM25 baseline; (scores, outcomes, facts about the run)."""
    questions = [q for q in load_questions(set_dir) if split == "all" or q.heldout == (split == "heldout")]
    vectors = any(mode != "fts" for mode in modes)
    with (
        tempfile.TemporaryDirectory(prefix="memstrata-recall-") as tmp,
        RecallDaemon(Path(tmp), set_dir, vectors) as served,
    ):
        started = time.monotonic()
        outcomes = ask_all(served, questions, modes) + ask_baseline(LineBaseline(set_dir), questions)
        facts = {
            "questions": len(questions),
            "chunks": served.chunks,
            "embed_s": round(served.embed_seconds, 1),
            "search_s": round(time.monotonic() - started, 1),
        }
    return score(outcomes), outcomes, facts


def _set_dir(value: str) -> Path:
    """A set's name, or the directory of a set someone else wrote (their memory, their questions)."""
    if value in SETS:
        return SETS[value]
    path = Path(value)
    if not (path / "questions.yaml").is_file() or not (path / "workspace").is_dir():
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither a set ({', '.join(SETS)}) nor a directory with questions.yaml and workspace/"
        )
    return path


def main(quick: bool = False, argv: list[str] | tuple[str, ...] = ()) -> None:
    """``quick`` (from ``bench/run.py --quick``): hybrid only."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", action="append", choices=MODES, help="modes to run (repeatable; default: all)")
    parser.add_argument(
        "--set",
        dest="set_dir",
        type=_set_dir,
        default=SET_DIR,
        metavar="NAME|DIR",
        help=f"which question set: {', '.join(SETS)} (default: tuned), or a directory of your own holding "
        "questions.yaml and workspace/ in the same form (bench/recall_set/README.md)",
    )
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    parser.add_argument("--misses", action="store_true", help="list every question without a hit in the top 5")
    parser.add_argument("--split", choices=SPLITS, default="all", help="ask only these questions (default: all)")
    parser.add_argument(
        "--budget-misses",
        type=int,
        choices=BUDGETS,
        metavar="TOKENS",
        help="list every question whose gold line is not in the answer at this budget (200, 400 or 800)",
    )
    args = parser.parse_args(list(argv))
    modes = tuple(args.mode or (("hybrid",) if quick else MODES))
    scores, outcomes, facts = run(modes, args.set_dir, args.split)
    if args.json:
        print(json.dumps({"facts": facts, "scores": scores}, ensure_ascii=False, indent=1))
        return
    print(
        f"{facts['questions']} questions, {facts['chunks']} chunks embedded in {facts['embed_s']} s, "
        f"searches took {facts['search_s']} s"
    )
    print(budget_table(scores))
    print(format_tables(scores))
    if args.budget_misses:
        n = args.budget_misses
        print(f"\nmisses within {n} tokens (the gold line not in what the answer gives):")
        for o in outcomes:
            if not o.in_budget.get(n):
                print(f"  [{o.mode}] {o.question.id} {o.question.kind}: {o.question.text}")
                print(f"      gold {o.question.gold} got {o.given.get(n)}")
    if args.misses:
        print("\nmisses (no hit in the top 5):")
        for o in outcomes:
            if not o.rank or o.rank > 5:
                split = "heldout" if o.question.heldout else "dev"
                print(f"  [{o.mode}] {o.question.id} {o.question.kind} ({split}) rank={o.rank}: {o.question.text}")
                print(f"      gold {o.question.gold} got {o.top}")


if __name__ == "__main__":
    main(argv=sys.argv[1:])
