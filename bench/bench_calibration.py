"""The confidence of L3 results (layers/local/ranking/calibration.py): fitted on the tuned set, checked on the
blind one.

Each recall set's memory is served by the real daemon with every chunk embedded
(bench/recall.py's RecallDaemon), and questions are asked in fts and hybrid mode
with ``explain``:

- the tuned set's questions against their own memory (a result is right when it
  holds the question's marked answer) and against the chat set's memory (no result
  there can be: the scale must also know a memory without the answer);
- the blind set's (bench/recall_set_untuned) the same way: never used for fitting.

From the tuned set's results a logistic model is fitted (with the cosine: hybrid;
without: fts) over the features the search uses (``calibration.features``) and
printed beside the coefficients the code ships.  Then, for the confidence the
daemon returned, per set: predicted against actual share of right answers by
band, the calibration error (ECE: their gap, weighted by band size), and what
``--min-score`` 0.3 / 0.5 keeps and how often it is right; and the same for the
cosine relevance ``--threshold`` cuts on (0.5), for comparison.

    .venv/bin/python bench/run.py calibration      # several minutes: three memories embedded
"""

from __future__ import annotations

import itertools
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.recall import SETS, RecallDaemon, first_hit, load_questions
from layers.local.ranking import calibration

BANDS = (0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.01)
CUTS = (0.3, 0.5)
#: (question set, memory): the memories each set's questions are asked of; a set's own memory holds the answers.
PAIRS = {"tuned": ("tuned", "chat"), "untuned": ("untuned", "chat")}


@dataclass
class Result:
    questions: str  # the set the question is from
    memory: str  # the set whose memory answered
    mode: str
    rank: int
    full_match: bool
    cosine: float | None
    chinese: bool
    confidence: float
    relevance: float | None  # the cosine on the threshold's scale (with explain, when the query had a vector)
    right: bool


def ask(served: RecallDaemon, questions: str, memory: str) -> list[Result]:
    assert served.client is not None
    out = []
    for q in load_questions(SETS[questions]):
        for mode in ("fts", "hybrid"):
            answer = served.client.search("main", q.text, mode=mode, limit=10, explain=True)
            for rank, r in enumerate(answer["results"], start=1):
                ranks = r.get("ranks") or {}
                full = answer["matched"] == "all" and ("fts" in ranks or "fts@date" in ranks)
                right = memory == questions and first_hit(q, [r]) is not None
                out.append(
                    Result(
                        questions,
                        memory,
                        mode,
                        rank,
                        full,
                        r.get("cosine"),
                        calibration.is_chinese(q.text),
                        r["confidence"],
                        r.get("relevance"),
                        right,
                    )
                )
    return out


def collect(tmp: Path) -> list[Result]:
    results: list[Result] = []
    for memory in ("tuned", "untuned", "chat"):
        with RecallDaemon(tmp / memory, set_dir=SETS[memory]) as served:
            print(f"{memory}: {served.chunks} chunks embedded in {served.embed_seconds:.0f} s", flush=True)
            for questions, memories in PAIRS.items():
                if memory in memories:
                    results += ask(served, questions, memory)
    return results


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-2) -> np.ndarray:
    """Logistic regression by Newton's method (a few features, a few thousand rows: no library needed)."""
    w = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        hessian = x.T @ (x * (p * (1 - p))[:, None]) + l2 * np.eye(len(w))
        w -= np.linalg.solve(hessian, x.T @ (p - y) + l2 * w)
    return w


def refit(results: list[Result], with_cosine: bool) -> dict[str, float]:
    shipped = calibration.WITH_COSINE if with_cosine else calibration.LEXICAL
    names = list(shipped)
    rows = [
        r for r in results if r.mode == ("hybrid" if with_cosine else "fts") and (r.cosine is not None) == with_cosine
    ]
    x = np.array([[calibration.features(r.rank, r.full_match, r.cosine, r.chinese)[n] for n in names] for r in rows])
    w = fit(x, np.array([float(r.right) for r in rows]))
    return dict(zip(names, (round(float(v), 3) for v in w), strict=True))


def ece(p: np.ndarray, y: np.ndarray) -> float:
    total = 0.0
    for lo, hi in itertools.pairwise(BANDS):
        band = (p >= lo) & (p < hi)
        if band.any():
            total += band.sum() * abs(p[band].mean() - y[band].mean())
    return total / max(1, len(p))


def report(results: list[Result], questions: str, mode: str) -> str:
    rows = [r for r in results if r.questions == questions and r.mode == mode]
    p = np.array([r.confidence for r in rows])
    y = np.array([float(r.right) for r in rows])
    bands = []
    for lo, hi in itertools.pairwise(BANDS):
        band = (p >= lo) & (p < hi)
        if band.any():
            bands.append(f"{lo:.1f}-{min(hi, 1):.1f}: {p[band].mean():.2f}/{y[band].mean():.2f} (n {band.sum()})")
    cuts = []
    for cut in CUTS:
        kept = p >= cut
        right = y[kept].mean() if kept.any() else math.nan
        cuts.append(f"--min-score {cut}: {kept.sum()} kept, {right:.2f} right, {y[kept].sum() / max(1, y.sum()):.2f} "
                    "of the right answers")  # fmt: skip
    relevance = np.array([r.relevance if r.relevance is not None else -1.0 for r in rows])
    if mode == "hybrid":
        kept = relevance >= 0.5
        right = y[kept].mean() if kept.any() else math.nan
        cuts.append(f"--threshold 0.5 (cosine): {kept.sum()} kept, {right:.2f} right")
    return (
        f"{questions} questions, {mode}: {len(rows)} results, ECE {ece(p, y):.3f}\n"
        f"    predicted/actual by band: {'; '.join(bands)}\n    " + "\n    ".join(cuts)
    )


def main(quick: bool = False) -> None:
    del quick  # three memories embedded either way: the fit needs every question
    with tempfile.TemporaryDirectory(prefix="memstrata-calibration-") as tmp:
        results = collect(Path(tmp))
    tuned = [r for r in results if r.questions == "tuned"]
    for with_cosine, shipped in ((True, calibration.WITH_COSINE), (False, calibration.LEXICAL)):
        what = "hybrid, with the cosine" if with_cosine else "fts"
        print(f"fitted on the tuned set ({what}): {refit(tuned, with_cosine)}")
        print(f"  shipped: {shipped}")
    for questions in PAIRS:
        for mode in ("fts", "hybrid"):
            print(report(results, questions, mode))


if __name__ == "__main__":
    main()
