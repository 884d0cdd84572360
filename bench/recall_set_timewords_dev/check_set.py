"""Check the time-words DEV recall set on its own: daily-note format, and every question's gold and anchor.

Standalone (standard library plus PyYAML); it does not use the project's code, so it checks the
set as data, not the search system. Besides the people set's checks it checks each kind's point:
`recently` questions carry a recency word and so do their gold turns (and most gold turns are not in
the newest session); `relative` gold turns carry a relative date word; `dated` questions name their
gold note's date, which the note's turns never spell out; `changed` gold turns are not in the first
session; no note spells out its own date in any turn. Exits non-zero and prints each problem if anything is off.

    python3 check_set.py
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from collections import Counter
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
WS = HERE / "workspace"
TURN = re.compile(r"^- \*\*(Hannah|Marcus|Yutong|Lei):\*\* \S")
HEAD = re.compile(r"^# (\d{4}-\d{2}-\d{2}) — chat between \w+(, \w+)* and \w+$")
CJK = re.compile(r"[\u4e00-\u9fff]")
KINDS = {"recently", "relative", "changed", "dated"}
MINIMUM = {"recently": 20, "relative": 16, "changed": 12, "dated": 10}
RECENT = re.compile(r"recently|lately|these days|最近|近来|这阵子", re.I)
RELATIVE = re.compile(
    r"yesterday|the day before|last (week|weekend|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
    r"|\bon (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
    r"|昨天|前天|上周|上星期|上个月|上礼拜",
    re.I,
)
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def lang_of(text: str) -> str:
    """'zh' when the text has more CJK characters than Latin letters, else 'en'."""
    cjk = len(CJK.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return "zh" if cjk and cjk * 2 >= latin else "en"


def date_forms(day: dt.date) -> list[str]:
    """Ways a question or a turn could spell out the day: 2024-03-09, 9 March, March 9, 3月9日/号."""
    month = MONTHS[day.month - 1]
    return [
        day.isoformat(),
        f"{day.day} {month}",
        f"{month} {day.day}",
        f"{day.month}月{day.day}日",
        f"{day.month}月{day.day}号",
    ]


def names_date(text: str, day: dt.date) -> bool:
    return any(re.search(rf"(?<!\d){re.escape(form)}(?!\d)", text) for form in date_forms(day))


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
        speakers = set()
        for i, line in enumerate(lines[2:], 3):
            t = TURN.match(line)
            if not t:
                problems.append(f"{path.name}:{i} not a turn: {line!r}")
            else:
                speakers.add(t.group(1))
        body = lines[2:]
        if not 20 <= len(body) <= 30:
            problems.append(f"{path.name}: {len(body)} turns, not 20-30")
        if not 2 <= len(speakers) <= 3:
            problems.append(f"{path.name}: {len(speakers)} speakers")
        if names_date("\n".join(body), dt.date.fromisoformat(path.stem)):
            problems.append(f"{path.name}: a turn spells out the note's own date")
        turns += len(body)
        kinds = Counter(lang_of(t.split(":**", 1)[1]) for t in body)
        mix = "mixed" if min(kinds["zh"], kinds["en"]) >= 3 else kinds.most_common(1)[0][0]
        langs[mix] += 1
        print(f"{path.name}: {len(body)} turns, {mix} (zh {kinds['zh']}, en {kinds['en']})")
    if not 14 <= len(notes) <= 18:
        problems.append(f"{len(notes)} sessions, not 14-18")
    if not (WS / "MEMORY.md").read_text(encoding="utf-8").startswith("# Background"):
        problems.append("MEMORY.md does not start with a background heading")
    print(f"{len(notes)} sessions, {turns} turns; sessions by language: {dict(langs)}")
    return notes


def check_kind(q: dict, line: str, name: str, first: str, newest: str, problems: list[str]) -> None:
    where, kind, text = q["id"], q["kind"], q["question"]
    day = dt.date.fromisoformat(name.removesuffix(".md"))
    if kind == "recently":
        if not RECENT.search(text):
            problems.append(f"{where}: recently question without a recency word")
        if not RECENT.search(line):
            problems.append(f"{where}: recently gold turn without a recency word")
    elif kind == "relative":
        if not RELATIVE.search(line):
            problems.append(f"{where}: relative gold turn without a relative date word")
    elif kind == "dated":
        if not names_date(text, day):
            problems.append(f"{where}: dated question does not name {day}")
    elif kind == "changed":
        if name == first:
            problems.append(f"{where}: changed gold in the first session")
        if RECENT.search(text):
            problems.append(f"{where}: changed question uses a recency word")


def check_questions(notes: dict[str, list[str]], problems: list[str]) -> None:
    questions = yaml.safe_load((HERE / "questions.yaml").read_text(encoding="utf-8"))
    ids = Counter(q["id"] for q in questions)
    problems += [f"duplicate id {i}" for i, n in ids.items() if n > 1]
    first, newest = min(notes), max(notes)
    per_kind: Counter[str] = Counter()
    per_lang: Counter[tuple[str, str]] = Counter()
    held: Counter[str] = Counter()
    recent_newest = 0
    for q in questions:
        where = q["id"]
        if set(q) != {"id", "kind", "lang", "heldout", "question", "gold"}:
            problems.append(f"{where}: fields {sorted(q)}")
        if q["kind"] not in KINDS:
            problems.append(f"{where}: kind {q['kind']}")
        per_kind[q["kind"]] += 1
        per_lang[q["kind"], q["lang"]] += 1
        if q["heldout"] != (per_kind[q["kind"]] % 3 == 0):
            problems.append(f"{where}: heldout should be {per_kind[q['kind']] % 3 == 0}")
        held[q["kind"]] += bool(q["heldout"])
        if lang_of(q["question"]) != q["lang"]:
            problems.append(f"{where}: question language is not {q['lang']}")
        if not 1 <= len(q["gold"]) <= 2:
            problems.append(f"{where}: {len(q['gold'])} gold turns")
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
            check_kind(q, span, name, first, newest, problems)
            if q["kind"] == "dated":
                day = dt.date.fromisoformat(name.removesuffix(".md"))
                if names_date("\n".join(lines[2:]), day):
                    problems.append(f"{where}: {name} spells out its own date in a turn")
            if q["kind"] == "recently" and name == newest:
                recent_newest += 1
    for kind, least in MINIMUM.items():
        if per_kind[kind] < least:
            problems.append(f"only {per_kind[kind]} {kind} questions (want {least})")
    if recent_newest * 3 > per_kind["recently"]:
        problems.append(f"{recent_newest} of {per_kind['recently']} recently golds are in the newest session")
    if not 64 <= len(questions) <= 80:
        problems.append(f"{len(questions)} questions, not 64-80")
    print(f"{len(questions)} questions: {dict(per_kind)}; heldout {dict(held)} ({sum(held.values())})")
    print("by kind and language:", {f"{k}/{lang}": n for (k, lang), n in sorted(per_lang.items())})
    print(f"recently golds in the newest session ({newest}): {recent_newest}")


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
