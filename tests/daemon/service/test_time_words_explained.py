"""`memstrata search --explain` says why a time word raised a result (issue 50 item 3), through the running daemon."""

from __future__ import annotations

import json

from tests.helpers import LEAN, init_root, run_cli, wait_for


def _chat(day: str, *turns: str) -> str:
    return f"# {day} — chat between Maya and Theo\n\n" + "".join(f"- {turn}\n" for turn in turns)


def test_a_line_told_of_the_question_s_days_in_its_note_s_time_is_explained(tmp_path, daemons):
    """The note of 2023-04-08 says Maya moved in "last Saturday": asked what happened on April 1st, that line is
    the answer's focus, and both the JSON answer and the human one say it was read as 2023-04-01 in its note's time."""
    config = init_root(tmp_path, **LEAN)
    memory = tmp_path / "workspace" / "memory"
    daemons(config)
    notes = {
        "2023-03-18": _chat("2023-03-18", "**Maya:** We made an offer on the bungalow with the blue door."),
        "2023-04-08": _chat("2023-04-08", "**Theo:** How's the bungalow?", "**Maya:** We moved in last Saturday!"),
        "2023-04-29": _chat("2023-04-29", "**Maya:** The bungalow needs a new fence, we moved the old one out."),
        "2023-02-04": _chat("2023-02-04", "**Theo:** Rocket pulled a muscle at the dog park."),
        "2023-02-25": _chat("2023-02-25", "**Maya:** Pottery is on hold for a while."),
    }
    for day, text in notes.items():
        (memory / f"{day}.md").write_text(text)
    question = "When did Maya move into the bungalow on April 1st?"

    def answered():
        proc = run_cli("search", question, "--agent", "main", "--json", "--explain", config=config)
        answer = json.loads(proc.stdout)
        first = answer["results"][0] if answer["results"] else {}
        return answer if first.get("path") == "memory/2023-04-08.md" and first.get("told") else None

    answer = wait_for(answered, what="the note that says 'last Saturday' first, told")
    first = answer["results"][0]
    assert first["focus"] == [4, 4]
    assert "'last Saturday': 2023-04-01 in its note's time (2023-04-08)" in first["told"]
    human = run_cli("search", question, "--agent", "main", "--explain", config=config).stdout
    assert "time words: line 4 says 'last Saturday': 2023-04-01" in human
