"""No control character an agent wrote reaches the operator's terminal or the text log (issue 44, item 5).

A held-back file named ``memory/x\\x1b]0;PWNED\\x07.md`` made ``memstrata status`` set the terminal's
title (OSC 52 would have written its clipboard) and the text log kept every ESC.  These tests drive
the real renderers (status, search, L4 listings and history, errors) and the real log formatters
with generated names, memory texts and metadata holding C0/C1 controls, ESC/OSC/CSI sequences, DEL
and bidi overrides, and check that what is printed holds none of them raw, while the JSON forms
read back exactly what was given.
"""

from __future__ import annotations

import json
import logging

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.common.logs import EscapingFormatter, JournalFormatter, JsonFormatter
from daemon.common.terminal import UNSAFE, escaped, for_terminal, json_text
from daemon.front import failures
from daemon.front.conversation_commands import _print_memory, print_memory_history
from daemon.front.local_commands import print_conversation, print_search
from daemon.front.options import echo_json
from daemon.front.status import render

OSC_TITLE = "\x1b]0;PWNED\x07"
OSC_CLIPBOARD = "\x1b]52;c;aGVsbG8=\x07"
CSI_8BIT = "\x9b31m"
DANGEROUS = [
    *(chr(c) for c in range(0x20)),
    "\x7f",
    *(chr(c) for c in range(0x80, 0xA0)),
    *(chr(c) for c in range(0x202A, 0x202F)),
    *(chr(c) for c in range(0x2066, 0x206A)),
    "\u200e",
    "\u200f",
    "\u061c",
    "\u2028",
    "\u2029",
    OSC_TITLE,
    OSC_CLIPBOARD,
    CSI_8BIT,
    "\x1b[2J\x1b[H",
]
#: Text an agent may write: anything, with the dangerous characters and sequences often in it.
HOSTILE_TEXT = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(DANGEROUS)), max_size=8).map("".join)
#: A file name as Linux allows it (no NUL, no slash), as the daemon reports it: relative to the workspace.
HOSTILE_NAME = HOSTILE_TEXT.map(lambda s: "memory/" + (s.replace("/", "_").replace("\x00", "") or "x") + ".md")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def raw_controls(text: str, allowed: str = "\n") -> list[str]:
    """The unsafe characters in ``text`` apart from ``allowed`` (the renderer's own line breaks)."""
    return [c for c in UNSAFE.findall(text) if c not in allowed]


# ------------------------------------------------------------------ the helper


def test_the_reported_name_is_written_with_escapes():
    name = f"memory/evil{OSC_TITLE}{OSC_CLIPBOARD}{CSI_8BIT}\u202egpj.md"
    assert escaped(name) == "memory/evil\\x1b]0;PWNED\\x07\\x1b]52;c;aGVsbG8=\\x07\\x9b31m\\u202egpj.md"


def test_bytes_that_are_not_utf8_are_escaped_as_before():
    assert escaped("memory/bad\udcffname.md") == "memory/bad\\xffname.md"


@given(HOSTILE_TEXT)
def test_escaped_text_holds_no_control(text):
    assert raw_controls(escaped(text), allowed="") == []
    assert raw_controls(escaped(text, keep_newlines=True)) == []
    assert escaped(text, keep_newlines=True).count("\n") == text.count("\n")


@given(st.text(alphabet=st.characters(blacklist_categories=["Cc", "Cf", "Cs", "Zl", "Zp"])))
def test_clean_text_is_unchanged(text):
    assert escaped(text) == text


DOCUMENTS = st.recursive(
    HOSTILE_TEXT | st.integers() | st.none(), lambda inner: st.lists(inner) | st.dictionaries(HOSTILE_TEXT, inner)
)


@given(DOCUMENTS)
def test_json_text_is_exact_json_without_raw_controls(value):
    text = json_text(value, indent=2)
    assert json.loads(text) == value
    assert raw_controls(text) == []
    assert raw_controls(str(for_terminal(value)), allowed="") == []


# ------------------------------------------------------------------ what the front prints


def _status(name: str, text: str) -> dict:
    """A status document as the daemon sends it, every agent-written field holding ``name`` or ``text``."""
    agent = {
        "id": "main",
        "workspace": f"/root/.openclaw/workspace/{text}",
        "files": 3,
        "last_commit": {"sha": "0123456789", "time": "2026-12-01T10:00:00+00:00", "subject": text},
        "pending_commit": False,
        "held_back": [{"path": name, "line": 1, "kind": "api_key"}],
        "naming_violations": [name],
        "skipped": [{"path": name, "reason": text}],
        "not_indexed": [{"path": name + "x", "reason": text}],
        "refused": [{"path": name, "reason": text}],
        "last_error": text,
        "index": {"state": "ready", "files": 3, "chunks": 2, "identity": text, "error": text},
        "history_lost": [{"found": "2026-12-01T10:00:00+00:00", "commit": "0123456", "subject": text, "copy": name}],
    }
    return {
        "daemon": {"running": True, "pid": 1, "version": "0.1", "uptime_s": 5, "config_error": text},
        "watcher": {"mode": "inotify", "reason": text},
        "reconcile": {"time": None},
        "limits": {"max_file_mb": 5, "debounce_ms": 300, "quiet_period_s": 5, "max_delay_s": 60},
        "vectors": {"backend": "off"},
        "conversation": {
            "enabled": True,
            "backend": "embedded",
            "collection": text,
            "reachable": False,
            "breaker": {"last_error": text},
            "queue": {
                "set_aside": 1,
                "set_aside_recent": [{"write_id": "w", "agent_id": "main", "reason": text}],
                "checkpoint_error": text,
            },
        },
        "storage": {"ok": False, "problems": [{"place": "git", "agent": "main", "path": name, "error": text}]},
        "agents": [agent],
    }


@FAST
@given(name=HOSTILE_NAME, text=HOSTILE_TEXT)
def test_status_text_holds_no_raw_control(name, text):
    for agent in (None, "main"):
        out = render(_status(name, text), agent)  # type: ignore[arg-type]
        assert raw_controls(out) == [], out


def _memory(text: str, name: str) -> dict:
    return {
        "id": "6f1c1f62-0000-4000-8000-000000000000",
        "memory": text,
        "agent_id": "alpha",
        "visibility": "project",
        "project_id": name,
        "memory_type": text,
        "created_at": text,
        "updated_at": text + "x",
        "expiration_date": text,
        "trust": text,
        "state": "superseded",
        "invalid_at": text,
        "superseded_by": name,
        "metadata": {text: text},
        "score": 0.5,
    }


@FAST
@given(name=HOSTILE_NAME, text=HOSTILE_TEXT)
def test_search_and_listings_hold_no_raw_control(capsys, name, text):
    hit = {"path": name, "lines": [1, 2], "heading": text, "score": 1.0, "text": text, "snippet": text}
    print_search({"results": [hit], "degraded": True, "reason": text, "relaxed": True}, explain=False)
    print_conversation({"results": [_memory(text, name)]})  # type: ignore[typeddict-item]
    _print_memory(1, _memory(text, name))
    out, err = capsys.readouterr()
    assert raw_controls(out) == [] and raw_controls(err) == [], (out, err)
    # a memory's or a passage's own line breaks stay, each line indented under its entry: none forges one
    assert all(line.startswith(("1. ", "   ", "(")) for line in out.splitlines() if line), out


@FAST
@given(name=HOSTILE_NAME, text=HOSTILE_TEXT)
def test_memory_history_holds_no_raw_control(capsys, monkeypatch, name, text):
    answer = {
        "memory_id": "m",
        "results": [{"event": "ADD", "new_memory": text, "created_at": text}],
        "chain": [
            {"id": "m", "memory": text, "valid_from": text, "invalid_at": text},
            {"id": name, "memory": text, "valid_from": text, "invalid_at": None},
        ],
    }
    monkeypatch.setattr("daemon.front.conversation_commands._ask", lambda ctx, agent, request: answer)
    print_memory_history(click.Context(click.Command("history")), "alpha", "m", as_json=False)
    out, _ = capsys.readouterr()
    assert raw_controls(out) == [], out
    print_memory_history(click.Context(click.Command("history")), "alpha", "m", as_json=True)
    as_json, _ = capsys.readouterr()
    assert json.loads(as_json) == answer and raw_controls(as_json) == []


@FAST
@given(text=HOSTILE_TEXT)
def test_errors_hold_no_raw_control_and_json_errors_are_exact(capsys, text):
    failures.show(failures.Failure(f"no memory {text}"), as_json=False)
    _, err = capsys.readouterr()
    assert raw_controls(err) == [], err
    failures.show(failures.Failure(f"no memory {text}"), as_json=True)
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["message"] == f"no memory {text}"
    assert raw_controls(out) == [] and raw_controls(err) == []


@FAST
@given(value=st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=4))
def test_json_output_is_exact(capsys, value):
    echo_json(value)
    out, _ = capsys.readouterr()
    assert json.loads(out) == value and raw_controls(out) == []


# ------------------------------------------------------------------ the log


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("daemon.files.tracker", logging.WARNING, __file__, 1, msg, args, exc_info)


@FAST
@given(name=HOSTILE_NAME, text=HOSTILE_TEXT)
def test_the_text_log_holds_no_raw_control_and_no_forged_line(name, text):
    for formatter in (JournalFormatter(journal=False), JournalFormatter(journal=True), EscapingFormatter()):
        line = formatter.format(_record("%s: holding back %s from git: %s", "main", name, text))
        assert raw_controls(line) == [], line
        _first, *more = line.split("\n")
        assert all(part.startswith((" ", "<4> ")) for part in more), "no forged record"
        if not getattr(formatter, "journal", False):  # (journald prefixes every line with its priority)
            assert escaped(name, keep_newlines=True).replace("\n", "\n    ") in line
    try:
        raise ValueError(f"cannot read {text}")
    except ValueError as exc:
        block = JournalFormatter(journal=False).format(_record("%s: failed", "main", exc=exc))
    assert raw_controls(block) == []
    assert block.splitlines()[1] == "Traceback (most recent call last):", "a traceback keeps its own lines"


@FAST
@given(name=HOSTILE_NAME)
def test_the_json_log_is_exact(name):
    entry = json.loads(line := JsonFormatter().format(_record("%s: holding back %s", "main", name)))
    assert entry["message"] == f"main: holding back {name}"
    assert raw_controls(line) == []


@pytest.mark.parametrize("args", [("%d files", ("many",)), ("%(a)s", ({"b": 1},))])
def test_a_bad_log_call_is_formatted_as_logging_would(args):
    """A format string and arguments that do not match fail in logging's own way, not in the escaping."""
    msg, values = args
    record = _record(msg, *values)
    with pytest.raises((TypeError, KeyError)):
        record.getMessage()
    with pytest.raises((TypeError, KeyError)):
        EscapingFormatter().format(record)
