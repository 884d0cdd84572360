"""Recall on the bilingual dev sets must not fall below the committed figures (bench/recall_set/README.md).

Four sets, each with its own ``floor.json``: the one the search was tuned on, the one written blind and
never tuned on (issue 24), English questions over chat notes (issue 29), and blind cross-lingual questions
over the first set's workspace (issue 24, tuned on).

Runs ``bench/recall.py`` for real: a fresh root, the real daemon, the real
llama.cpp model, every chunk embedded, every question asked in hybrid and
full-text mode. The floors live in ``bench/recall_set/floor.json``; a change
that improves recall raises them in the same commit.
"""

from __future__ import annotations

import json

import pytest

from bench.recall import SETS, load_questions, run
from daemon.common.config import DEFAULT_MODEL_PATH
from layers.local.models import companion

pytestmark = pytest.mark.slow


def test_the_set_matches_its_workspace():
    questions = load_questions()
    assert len(questions) >= 100
    assert {q.kind for q in questions} == {
        "keyword-en",
        "keyword-zh",
        "lookup",
        "paraphrase-en",
        "paraphrase-zh",
        "cross-lingual",
        "temporal",
    }
    held = sum(q.heldout for q in questions)
    assert abs(held / len(questions) - 1 / 3) < 0.05


@pytest.mark.parametrize("name", ["tuned", "untuned", "chat", "crossling"])
def test_overall_recall_at_5_stays_above_the_committed_floor(name):
    assert DEFAULT_MODEL_PATH.is_file(), "the model is built by `make setup` (memstrata model build)"
    assert companion.available(), "the companion model's package is a dependency (`make setup` installs it)"
    floors = json.loads((SETS[name] / "floor.json").read_text())
    scores, outcomes, facts = run(("hybrid", "fts"), SETS[name])
    measured = {mode: scores[mode]["all"]["overall"]["r5"] for mode in ("hybrid", "fts")}
    misses = [f"{o.mode} {o.question.id} {o.question.text}" for o in outcomes if not o.rank or o.rank > 5]
    for mode, floor in floors.items():
        if mode.startswith("_"):
            continue
        assert measured[mode] >= floor, (
            f"{mode} R@5 {measured[mode]} fell below the committed {floor} ({facts}); misses:\n" + "\n".join(misses)
        )


def test_a_set_written_elsewhere_is_named_by_its_directory(tmp_path):
    """Someone else's memory and questions run through the same harness: `--set DIR`."""
    import argparse
    import shutil

    from bench.recall import _set_dir

    assert _set_dir("chat") == SETS["chat"]
    own = tmp_path / "their-set"
    shutil.copytree(SETS["crossling"], own, symlinks=False)  # the workspace link becomes their own copy
    assert _set_dir(str(own)) == own
    assert len(load_questions(own)) == len(load_questions(SETS["crossling"]))
    with pytest.raises(argparse.ArgumentTypeError, match=r"questions\.yaml and workspace/"):
        _set_dir(str(tmp_path))
