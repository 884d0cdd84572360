"""``memstrata status`` as an operator of ten agents reads it (a real daemon): a summary line first,
the problems next, one line per agent within 100 columns; ``--agent`` for one agent's detail;
``--watch`` until Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess

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


def test_watch_repeats_until_interrupted(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN)
    daemons(config)
    cmd = [*MEMSTRATA, "--config", str(config), "status", "--watch", "--interval", "0.2", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        documents = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert all(doc["daemon"]["running"] for doc in documents)
    assert proc.returncode == 0 and "Traceback" not in err, err
