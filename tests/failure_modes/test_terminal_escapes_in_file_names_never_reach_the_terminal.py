"""A file named with ESC/OSC sequences drove the operator's terminal through ``memstrata status``.

Before: a held-back file ``memory/evil\\x1b]0;PWNED\\x07….md`` was printed raw by ``memstrata status``
(the terminal's title changed; an OSC 52 would have written the clipboard), and the daemon's text
log kept every ESC.  The JSON log escaped it.  Now every text the front prints and the text log
escape control characters (``\\x1b]0;PWNED\\x07``), and the JSON outputs stay exact JSON.  The
renderers and formatters are driven with generated names in tests/daemon/common/test_terminal.py;
this test is the reported case end to end: a real daemon, real files, the real CLI.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import FAKE_API_KEY, LEAN, init_root, run_cli, wait_for

pytestmark = pytest.mark.slow

HOSTILE = "evil\x1b]0;PWNED\x07\x1b]52;c;aGVsbG8=\x07\x9b31m\u202egpj"
SHOWN = "evil\\x1b]0;PWNED\\x07\\x1b]52;c;aGVsbG8=\\x07\\x9b31m\\u202egpj"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _clean(text: str) -> bool:
    return not any(c in text for c in RAW)


def test_control_characters_in_file_names_never_reach_the_terminal_or_the_text_log(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    daemon = daemons(config)
    (ws / "memory" / f"{HOSTILE}-held.md").write_text(f"api_key = {FAKE_API_KEY}\n")
    (ws / "memory" / f"{HOSTILE}-kept.md").write_text("the quokka ledger lives in room 4\n")
    wait_for(lambda: daemon.agent("main")["held_back"], what=f"the secret held back\n{daemon.log()}")
    wait_for(lambda: "quokka" in run_cli("search", "quokka", "--agent", "main", config=config).stdout)

    status = run_cli("status", config=config)
    assert _clean(status.stdout + status.stderr), status.stdout
    assert "HELD BACK from git" in status.stdout and f"memory/{SHOWN}-held.md" in status.stdout.split(), status.stdout
    as_json = json.loads(run_cli("status", "--json", config=config).stdout)
    held = [h["path"] for h in as_json["agents"][0]["held_back"]]
    assert held == [f"memory/{HOSTILE}-held.md"], "the JSON keeps the exact name"

    found = run_cli("search", "quokka", "--agent", "main", config=config)
    assert _clean(found.stdout) and f"memory/{SHOWN}-kept.md" in found.stdout, found.stdout

    wait_for(lambda: SHOWN in run_cli("history", "--agent", "main", config=config).stdout, what="committed")
    history = run_cli("history", "--agent", "main", config=config)
    assert _clean(history.stdout), history.stdout
    subjects = [c["subject"] for c in json.loads(run_cli("history", "--agent", "main", "--json", config=config).stdout)]
    assert any(f"{HOSTILE}-kept.md" in s for s in subjects), subjects

    log = daemon.log()
    assert SHOWN in log and _clean(log), [line for line in log.splitlines() if "evil" in line]
