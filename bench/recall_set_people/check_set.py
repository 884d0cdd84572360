"""Check the people recall set on its own: daily-note format, and every question's gold and anchor.

Standalone (standard library plus PyYAML); it does not use the project's code, so it checks the
set as data, not the search system. Exits non-zero and prints each problem if anything is off.

    python3 bench/recall_set_people/check_set.py
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
WS = HERE / "workspace"
TURN = re.compile(r"^- \*\*(Lily|Wei|Hannah):\*\* \S")
HEAD = re.compile(r"^# (\d{4}-\d{2}-\d{2}) — chat between \w+(, \w+)* and \w+$")
CJK = re.compile(r"[\u4e00-\u9fff]")
KINDS = {"single-hop", "multi-hop", "temporal", "cross-lingual", "paraphrase"}


def lang_of(text: str) -> str:
    """'zh' when the text has more CJK characters than Latin letters, else 'en'."""
    cjk = len(CJK.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return "zh" if cjk and cjk * 2 >= latin else "en"


def check_notes(problems: list[str]) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {}
    turns = 0
    langs: Counter[str] = Counter()
    for path in sorted((WS / "memory").glob("*.md")):
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines = lines[:-1]
        notes[path.name] = lines
        m = HEAD.match(lines[0])
        if not m or m.group(1) != path.stem:
            problems.append(f"{path.name}:1 heading {lines[0]!r}")
        if lines[1] != "":
            problems.append(f"{path.name}:2 not blank")
        for i, line in enumerate(lines[2:], 3):
            if not TURN.match(line):
                problems.append(f"{path.name}:{i} not a turn: {line!r}")
        body = lines[2:]
        turns += len(body)
        kinds = Counter(lang_of(t.split(":**", 1)[1]) for t in body)
        mix = "mixed" if min(kinds["zh"], kinds["en"]) >= 3 else kinds.most_common(1)[0][0]
        langs[mix] += 1
        print(f"{path.name}: {len(body)} turns, {mix} (zh {kinds['zh']}, en {kinds['en']})")
    print(f"{len(notes)} sessions, {turns} turns; sessions by language: {dict(langs)}")
    return notes


def check_questions(notes: dict[str, list[str]], problems: list[str]) -> None:
    questions = yaml.safe_load((HERE / "questions.yaml").read_text(encoding="utf-8"))
    ids = Counter(q["id"] for q in questions)
    problems += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    per_kind: Counter[str] = Counter()
    held: Counter[str] = Counter()
    for q in questions:
        where = q["id"]
        if set(q) != {"id", "kind", "lang", "heldout", "question", "gold"}:
            problems.append(f"{where}: fields {sorted(q)}")
        if q["kind"] not in KINDS:
            problems.append(f"{where}: kind {q['kind']}")
        per_kind[q["kind"]] += 1
        if q["heldout"] != (per_kind[q["kind"]] % 3 == 0):
            problems.append(f"{where}: heldout should be {per_kind[q['kind']] % 3 == 0}")
        held[q["kind"]] += bool(q["heldout"])
        if lang_of(q["question"]) != q["lang"]:
            problems.append(f"{where}: question language is not {q['lang']}")
        if q["kind"] == "multi-hop" and len({g["file"] for g in q["gold"]}) < 2:
            problems.append(f"{where}: multi-hop gold within one file")
        for g in q["gold"]:
            name = g["file"].removeprefix("memory/")
            lines = notes.get(name)
            if lines is None:
                problems.append(f"{where}: no file {g['file']}")
                continue
            a, b = g["lines"]
            if not 3 <= a <= b <= len(lines):
                problems.append(f"{where}: lines {a}-{b} outside {name} turns")
                continue
            span = "\n".join(lines[a - 1 : b])
            if g["anchor"] not in span:
                problems.append(f"{where}: anchor not on {name}:{a}-{b}")
            count = "\n".join(lines).count(g["anchor"])
            if count != 1:
                problems.append(f"{where}: anchor occurs {count} times in {name}")
            answer_lang = lang_of(g["anchor"])
            if q["kind"] == "cross-lingual" and answer_lang == q["lang"]:
                problems.append(f"{where}: cross-lingual but question and answer both {q['lang']}")
            if q["kind"] in {"single-hop", "paraphrase"} and answer_lang != q["lang"]:
                problems.append(f"{where}: {q['kind']} question and answer in different languages")
    print(f"{len(questions)} questions: {dict(per_kind)}; heldout {dict(held)} ({sum(held.values())})")


def main() -> int:
    problems: list[str] = []
    notes = check_notes(problems)
    check_questions(notes, problems)
    for p in problems:
        print("PROBLEM:", p)
    print("ok" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
