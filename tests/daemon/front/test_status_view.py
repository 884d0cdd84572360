"""``memstrata status`` as an operator of ten agents reads it (a real daemon): a summary line first,
the problems next, one line per agent within 100 columns; ``--agent`` for one agent's detail;
``--watch`` until Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.common.terminal import escaped
from daemon.front.status import columns, render
from tests.helpers import FAKE_AWS_KEY, LEAN, MEMSTRATA, init_root, run_cli, wait_for

AGENTS = [f"agent-{n}" for n in range(1, 10)]  # and main: ten


def test_ten_agents_one_problem_read_at_a_glance(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    for agent_id in AGENTS:
        run_cli("agent", "add", agent_id, config=config)
    secret = tmp_path / "workspace" / "agents" / "agent-4-workspace" / "memory" / "2026-11-22.md"
    secret.write_text(f"# notes\n\naws_access_key_id = {FAKE_AWS_KEY}\n")
    d = daemons(config)
    wait_for(lambda: d.agent("agent-4")["held_back"], what="the secret held back")

    text = run_cli("status", config=config).stdout
    lines = text.splitlines()
    assert lines[0].startswith("memstrata ") and "1 problem; daemon running (pid" in lines[0], text
    assert "10 agents" in lines[0]
    assert lines[1] == "problems:"
    assert lines[2].startswith("  agent-4: HELD BACK from git: memory/2026-11-22.md line 3"), lines[2]
    assert FAKE_AWS_KEY not in text
    agent_lines = [line for line in lines if line.split(" ", 1)[0] in {"main", *AGENTS}]
    assert len(agent_lines) == 10, text
    assert "[1 problem]" in next(line for line in agent_lines if line.startswith("agent-4 "))
    assert all("problem" not in line for line in agent_lines if not line.startswith("agent-4 "))
    assert "index identity" not in text, "an agent's detail is for --agent"
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert len(lines) <= 25, text

    detail = run_cli("status", "--agent", "agent-4", config=config).stdout
    workspace = tmp_path / "workspace" / "agents" / "agent-4-workspace"
    assert f"agent-4  {workspace}" in detail and "problems: 1" in detail and "agent-1 " not in detail
    one = json.loads(run_cli("status", "--agent", "agent-4", "--json", config=config).stdout)
    assert [a["id"] for a in one["agents"]] == ["agent-4"]
    unknown = run_cli("status", "--agent", "nobody", "--json", config=config, check=False)
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "unknown_agent"

    secret.write_text("# notes\n\nthe key lives in the vault\n")
    wait_for(lambda: not d.agent("agent-4")["held_back"], what="the held-back report cleared")
    healthy = run_cli("status", config=config).stdout.splitlines()
    assert "healthy; daemon running" in healthy[0] and "problems:" not in healthy


# Starts the command with SIGINT ignored, as a non-interactive shell starts a background job (`make test &`,
# a CI runner, nohup): the child inherits the ignored disposition, and Python keeps it.
SIGINT_IGNORED = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.mark.parametrize("started", ["from a terminal", "with SIGINT ignored"])
def test_watch_repeats_until_interrupted(tmp_path, daemons, started):
    """Before: started with SIGINT ignored (its test in a fresh clone's `make test`), --watch never ended."""
    config = init_root(tmp_path, **LEAN)
    daemons(config)
    cmd = [*MEMSTRATA, "--config", str(config), "status", "--watch", "--interval", "0.2", "--json"]
    if started == "with SIGINT ignored":
        cmd = [sys.executable, "-c", SIGINT_IGNORED, *cmd[1:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        documents = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert all(doc["daemon"]["running"] for doc in documents)
    assert proc.returncode == 0 and "Traceback" not in err, err


# ------------------------------------------------------------------ within 100 columns, whatever the agents hold


def _agent(agent_id: str, n: int, *, name: str = "memory/2026-11-22.md", files: int = 1234) -> dict:
    return {
        "id": agent_id,
        "workspace": f"/root/.openclaw/workspace/agents/{agent_id}-workspace",
        "files": files,
        "last_commit": {"sha": "0123456789", "time": "2026-12-01T10:00:00+00:00", "subject": f"memstrata: {name}"},
        "pending_commit": n % 2 == 0,
        "index": {"state": "ready", "files": files, "chunks": 12_345, "pending_embeddings": 1_234}
        | {"pending_items": 1_200, "identity": "e5-small-q4 fts5-cjk-1 chunker-3"},
        "held_back": [{"path": name, "line": 3, "kind": "aws_access_key_id"}] if n == 4 else [],
        "naming_violations": [name] if n == 7 else [],
        "committing": {"done": 1_500, "total": 20_000} if n == 9 else None,
    }


def _document(agents: list[dict]) -> dict:
    return {
        "daemon": {"running": True, "pid": 4_194_303, "version": "0.1.0", "uptime_s": 9_999_999},
        "watcher": {"mode": "inotify"},
        "reconcile": {"time": "2026-12-01T10:00:00+00:00", "repaired": 0, "duration_ms": 17.3},
        "limits": {"max_file_mb": 5, "debounce_ms": 300, "quiet_period_s": 5, "max_delay_s": 60},
        "vectors": {"backend": "off"},
        "agents": agents,
    }


def _entries(text: str) -> list[str]:
    """The agents' lines: those that start with an agent id (a continued line starts with spaces)."""
    after_blank = text.split("\n\n", 1)[1]
    return [line.split(" ", 1)[0] for line in after_blank.splitlines() if line and not line.startswith(" ")]


def test_ten_agents_embedding_fit_in_100_columns():
    """The reported case: ten agents whose chunks wait for vectors made 106-column lines."""
    agents = [_agent(f"agent-{n:02d}", n) for n in range(1, 11)]
    text = render(_document(agents))  # type: ignore[arg-type]
    assert max(map(columns, text.splitlines())) <= 100, text
    assert _entries(text) == [a["id"] for a in agents], "still one entry per agent, in order"
    assert all("waiting for vectors" in line for line in text.splitlines() if line.startswith("agent-")), text


AGENT_ID = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,63}", fullmatch=True)
NAME = st.text(min_size=1, max_size=120).map(lambda s: "memory/" + s.replace("/", "_") + ".md")


@settings(max_examples=50, deadline=None)
@given(ids=st.lists(AGENT_ID, min_size=1, max_size=12, unique=True), name=NAME, files=st.integers(0, 10**7))
def test_every_status_line_fits_in_100_columns(ids, name, files):
    """Every line of the overview fits, but for a word (a path) longer than 100 columns: it is never cut."""
    agents = [_agent(agent_id, n, name=name, files=files) for n, agent_id in enumerate(ids, start=1)]
    text = render(_document(agents))  # type: ignore[arg-type]
    too_wide = [line for line in text.splitlines() if columns(line) > 100]
    assert all(len(line.split()) == 1 for line in too_wide), too_wide
    assert _entries(text) == ids
    if len(ids) >= 4 and not any(c.isspace() for c in escaped(name)):  # agent 4 holds it back: said whole
        assert escaped(name) in text.split(), text


def test_status_says_what_awaits_the_stores_flush_and_a_failing_flush():
    """Issue 45: answered adds the write-ahead log holds until the store's flush are counted, and a flush
    that fails is a problem (the writes are safe in the log, updates and deletes answer an error)."""
    conversation = {"enabled": True, "backend": "embedded", "collection": "memstrata", "reachable": True}
    waiting = _document([_agent("main", 1)]) | {
        "conversation": conversation | {"queue": {"unflushed": 7, "checkpoints": 3, "checkpoint_error": ""}}
    }
    text = render(waiting)  # type: ignore[arg-type]
    assert "awaiting the store's flush: 7 write(s), kept in the write-ahead log" in text
    assert "problems:" not in text
    failing = _document([_agent("main", 1)]) | {
        "conversation": conversation
        | {"queue": {"unflushed": 7, "checkpoints": 3, "checkpoint_error": "OSError: [Errno 28] No space left"}}
    }
    lines = render(failing).splitlines()  # type: ignore[arg-type]
    problems = lines[lines.index("problems:") + 1 :]
    assert any("the store's flush is failing" in line for line in problems), lines
    assert any("No space left" in line for line in lines), lines
