"""The conventions every ``memstrata`` command keeps (real subprocesses, no daemon unless said):
exit statuses 0/1/2/3, errors as JSON with ``--json``, ``--json`` on every command, no colour
when NO_COLOR, TERM=dumb or not a terminal, ``--agent`` from the current directory."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import time

import pytest

from tests.helpers import MEMSTRATA, git, init_root, run_cli


def _error(proc) -> dict:
    """The JSON error a ``--json`` call printed on stdout (and nothing else there)."""
    data = json.loads(proc.stdout)
    assert set(data) == {"error"} and set(data["error"]) == {"code", "message"}, data
    return data["error"]


def test_exit_statuses_and_json_errors(tmp_path):
    config = init_root(tmp_path)
    unknown = run_cli("note", "--agent", "nobody", "hello", config=config, check=False)
    assert unknown.returncode == 2 and "unknown agent 'nobody'" in unknown.stderr
    as_json = run_cli("note", "--agent", "nobody", "hello", "--json", config=config, check=False)
    assert as_json.returncode == 2
    assert _error(as_json)["code"] == "unknown_agent" and "known agents: main" in _error(as_json)["message"]
    invalid = run_cli("core", "--agent", "../x", "--json", config=config, check=False)
    assert invalid.returncode == 2 and _error(invalid)["code"] == "invalid_id"
    missing = run_cli("add", "--json", config=config, check=False)  # TEXT missing: click's own parse error
    assert missing.returncode == 2 and _error(missing) == {"code": "usage", "message": "Missing argument 'TEXT'."}
    no_command = run_cli("frobnicate", "--json", config=config, check=False)
    assert no_command.returncode == 2 and _error(no_command)["code"] == "usage"
    down = run_cli("add", "a memory", "--agent", "main", "--json", config=config, check=False)
    assert down.returncode == 3 and _error(down)["code"] == "daemon_unreachable"
    assert "Traceback" not in down.stderr and "memstrata run" in _error(down)["message"]
    text_down = run_cli("list", "--agent", "main", config=config, check=False)
    assert text_down.returncode == 3 and text_down.stdout == "" and text_down.stderr.startswith("Error: ")
    status = run_cli("status", "--json", config=config, check=False)
    assert status.returncode == 3 and json.loads(status.stdout)["daemon"]["running"] is False
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("vectors: [unclosed\n")
    broken = run_cli("note", "--agent", "main", "x", "--json", config=bad_config, check=False)
    assert broken.returncode == 1 and _error(broken)["code"] == "failed" and "bad.yaml" in _error(broken)["message"]


def test_help_documents_the_exit_statuses(tmp_path):
    text = " ".join(run_cli("--help").stdout.split())
    assert "0 ok, 1 runtime failure, 2 usage error" in text and "3 daemon unreachable" in text
    assert '{"error": {"code": ..., "message": ...}}' in text and "NO_COLOR" in text


def test_json_on_the_setting_up_commands(tmp_path):
    root = tmp_path / "root"
    first = json.loads(run_cli("init", "--root", str(root), "--json").stdout)
    assert first["config"] == str(root / "memstrata.yaml")
    assert {"action": "created", "what": str(root / "memstrata.yaml")} in first["steps"]
    again = json.loads(run_cli("init", "--root", str(root), "--json").stdout)
    assert {"action": "kept", "what": str(root / "memstrata.yaml")} in again["steps"]
    config = root / "memstrata.yaml"
    added = json.loads(run_cli("agent", "add", "ops-1", "--project", "infra", "--json", config=config).stdout)
    workspace = root / "workspace" / "agents" / "ops-1-workspace"
    assert (added["agent"], added["workspace"], added["created"]) == ("ops-1", str(workspace), True)
    assert {"action": "token", "what": str(workspace / ".memstrata" / "token")} in added["steps"]
    token = json.loads(run_cli("agent", "token", "ops-1", "--json", config=config).stdout)
    secret = (workspace / ".memstrata" / "token").read_text().strip()
    assert token == {"agent": "ops-1", "token_file": str(workspace / ".memstrata" / "token")}
    assert secret and secret not in json.dumps(token) and secret not in json.dumps(added)
    noted = json.loads(run_cli("note", "--agent", "ops-1", "deployed", "--json", config=config).stdout)
    assert noted == {"agent": "ops-1", "file": str(workspace / "memory" / f"{time.strftime('%Y-%m-%d')}.md")}


COMMANDS = [
    ["init"], ["agent", "add"], ["agent", "list"], ["agent", "token"], ["status"], ["core"], ["note"],
    ["history"], ["restore"], ["search"], ["reindex"], ["model", "build"], ["add"], ["get"], ["list"],
    ["update"], ["delete"], ["restore-memory"], ["cleanup"], ["consolidate"], ["backup"], ["restore-backup"],
    ["install"],
    ["uninstall"],
    ["fleet", "init-remote"], ["fleet", "authorize"],
    ["fleet", "add-host"], ["fleet", "hosts"], ["fleet", "remove-host"],
]  # fmt: skip


def test_every_command_takes_json():
    """Each command lists --json, except the two whose stdout is not theirs to shape: ``run``
    (the daemon's log) and ``mcp`` (the protocol); the list is checked against --help's."""
    listed = run_cli("--help").stdout.split("Commands:")[1].splitlines()
    names = {line.split()[0] for line in listed if line.startswith("  ") and line.split()}
    assert names == {c[0] for c in COMMANDS} | {"run", "mcp"}
    missing = [" ".join(c) for c in COMMANDS if "--json" not in run_cli(*c, "--help").stdout]
    assert not missing, f"no --json: {missing}"


def test_agent_defaults_to_the_workspace_the_command_runs_in(tmp_path):
    config = init_root(tmp_path)
    run_cli("agent", "add", "ops-1", config=config)
    spoke = tmp_path / "workspace" / "agents" / "ops-1-workspace"

    def note_in(cwd, *extra: str):
        cmd = [*MEMSTRATA, "--config", str(config), "note", "from here", "--json", *extra]
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)

    inside_spoke = note_in(spoke / "memory")  # a spoke's workspace lies inside main's: the deepest wins
    assert inside_spoke.returncode == 0, inside_spoke.stderr
    assert json.loads(inside_spoke.stdout)["agent"] == "ops-1"
    assert json.loads(note_in(tmp_path / "workspace").stdout)["agent"] == "main"
    assert json.loads(note_in(spoke, "--agent", "main").stdout)["agent"] == "main", "--agent still wins"
    outside = note_in(tmp_path)
    assert outside.returncode == 2 and _error(outside)["code"] == "no_agent"
    assert "give --agent ID" in _error(outside)["message"] and "ops-1" in _error(outside)["message"]


def _on_a_terminal(config, env: dict) -> bytes:
    """``search`` (offline: the daemon is down) with stdout on a pseudo-terminal; what it wrote."""
    leader, follower = pty.openpty()
    cmd = [*MEMSTRATA, "--config", str(config), "search", "--agent", "main", "memory"]
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    proc = subprocess.run(cmd, stdout=follower, stderr=subprocess.PIPE, env={**base, **env}, timeout=60)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize(
    ("env", "coloured"),
    [({"TERM": "xterm"}, True), ({"TERM": "xterm", "NO_COLOR": "1"}, False), ({"TERM": "dumb"}, False)],
)
def test_colour_only_on_a_terminal_that_wants_it(tmp_path, env, coloured):
    config = init_root(tmp_path)
    run_cli("reindex", config=config)
    out = _on_a_terminal(config, env)
    assert b"MEMORY.md" in out
    assert (b"\x1b[" in out) is coloured
    piped = run_cli("search", "--agent", "main", "memory", config=config, env={"TERM": "xterm"})
    assert "\x1b[" not in piped.stdout, "not a terminal: no colour"


def test_init_into_an_existing_workspace_keeps_it(tmp_path):
    """An OpenClaw host's workspace, with the user's own repository: init says kept and adds
    neither a file nor a commit to it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "AGENTS.md").write_text("# my agent\n")
    (workspace / "SOUL.md").write_text("# mine\n")
    git(workspace, "init", "-q")
    git(workspace, "add", "-A")
    git(workspace, "-c", "user.name=me", "-c", "user.email=me@example.org", "commit", "-qm", "mine")
    before = git(workspace, "rev-parse", "HEAD")
    out = run_cli("init", "--root", str(tmp_path)).stdout
    assert f"kept     {workspace} (an existing workspace: no file added, no commit)" in out
    assert git(workspace, "rev-parse", "HEAD") == before
    assert git(workspace, "log", "--format=%s").strip() == "mine"
    assert not (workspace / "CORE_INDEX.md").exists() and not (workspace / "MEMORY.md").exists()
    assert (workspace / "SOUL.md").read_text() == "# mine\n"
