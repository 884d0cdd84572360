"""The README's Quickstart works as written: every "while it runs" line, pasted into a shell.

Before: the block held ``--at <rev>`` (the shell reads ``<rev`` as a redirect from a file
called "rev": the line failed before memstrata ran), ``ms mcp`` (a stdio server that waits
for a client: the pasted block hung there), and ``make run`` printed init's hint "next:
memstrata … run" for the very command it then ran itself.  Here the block is extracted
from README.md and each line is run by bash, with the block's own alias, against a daemon
on a demo root made by ``memstrata init`` (the configuration ``make run`` uses, unchanged).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.helpers import REPO_ROOT, DaemonProcess, commits, init_root, wait_for

README = REPO_ROOT / "README.md"
BLOCK_INTRO = "While it runs, in another terminal:"
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # this checkout's code, whatever the venv's editable install


def quickstart_lines() -> list[str]:
    """The indented block after BLOCK_INTRO, one shell line each."""
    after = README.read_text(encoding="utf-8").split(BLOCK_INTRO, 1)[1].splitlines()[1:]
    lines: list[str] = []
    for line in after:
        if not line.strip():
            if lines:
                break
            continue
        assert line.startswith("    "), f"not part of an indented code block: {line!r}"
        lines.append(line[4:])
    return lines


def _shell(cwd: Path, alias: str, line: str) -> subprocess.CompletedProcess:
    script = f"set -e\nshopt -s expand_aliases\n{alias}\n{line}\n"
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )


def test_the_block_has_no_placeholders_and_no_command_that_waits_for_a_client():
    lines = quickstart_lines()
    assert lines[0].startswith('alias ms="$PWD/.venv/bin/memstrata --config $PWD/.demo/memstrata.yaml"')
    assert len(lines) >= 10
    for line in lines:
        command = line.split("  #", 1)[0]
        assert not re.search(r"<[A-Za-z][\w-]*>", command), f"a placeholder the shell cannot run: {line}"
        assert not re.match(r"ms mcp\b", command), "ms mcp is started by an MCP client, not pasted"
    assert "is the command an MCP client" in README.read_text(encoding="utf-8"), "ms mcp is explained instead"


def test_every_line_runs_against_a_daemon_on_a_demo_root(tmp_path):
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    (tmp_path / "skills").symlink_to(REPO_ROOT / "skills")
    config = init_root(tmp_path / ".demo")  # what `make run` writes, unchanged
    daemon = DaemonProcess(config, env={"PYTHONPATH": str(REPO_ROOT)})
    daemon.start()
    try:
        alias, *commands = quickstart_lines()
        for line in commands:
            proc = _shell(tmp_path, alias, line)
            assert proc.returncode == 0, f"{line}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr}"
            assert "Traceback" not in proc.stderr and "Error:" not in proc.stderr, (line, proc.stderr)
        elsewhere = _shell(tmp_path, f"{alias}\ncd /", "ms status")
        assert elsewhere.returncode == 0 and "daemon running" in elsewhere.stdout, "the alias works from anywhere"
        memory = (tmp_path / ".demo" / "workspace" / "MEMORY.md").read_text(encoding="utf-8")
        assert "a line to take back" not in memory, "restore brought the first version back"
        kept = [c for c in commits(tmp_path / ".demo" / "workspace") if ("M", "MEMORY.md") in c["changes"]]
        assert len(kept) >= 2, "the edit was committed before the restore (never lost), then the restore"
    finally:
        assert daemon.stop() == 0


def test_make_run_prints_no_hint_for_the_command_it_runs_itself(tmp_path):
    # -o: the virtualenv is set up already (this test never reinstalls it)
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-o", "setup", "-o", ".venv/.memstrata-setup", "run", f"DEMO_ROOT={tmp_path}"],
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            output.append(line)
            if "ready:" in line:
                break
        assert any("ready:" in line for line in output), "".join(output)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    text = "".join(output)
    assert f"created  {tmp_path}/memstrata.yaml" in text
    said = re.search(r"ending in `(ready: [^`]+)`", (REPO_ROOT / "README.md").read_text()).group(1)
    assert said in text, f"the README says the daemon is ready when it logs {said!r}:\n{text}"
    assert "next:" not in text, text
    wait_for(lambda: not (tmp_path / "run" / "memstrata.sock").exists(), timeout=20, what="the daemon stopped")
