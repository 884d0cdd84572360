"""cron.d/mem0-cleanup is a file cron accepts, and its commands work.

Checked with a parser that enforces the rules Debian's cron applies to
/etc/cron.d (cron(8)): a name of letters, digits, '_' and '-' only (a dot makes
cron skip the file); not writable by group or others; a final newline; every
job line has five time fields, a user and a command.  The commands themselves
are then run (paths pointed at this checkout) against a demo root.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from pathlib import Path

from daemon.common.config import load_config
from daemon.ops.install import render_cron
from tests.helpers import REPO_ROOT, init_root, run_cli, wait_for

CRON_FILE = REPO_ROOT / "cron.d" / "mem0-cleanup"
FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")
RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def parse(text: str) -> tuple[dict[str, str], list[tuple[list[str], str, str]]]:
    """Environment lines and jobs (time fields, user, command); AssertionError on what cron rejects."""
    assert text.endswith("\n"), "cron ignores a last line without a newline"
    env, jobs = {}, []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            key, _, value = line.partition("=")
            env[key] = value
            continue
        parts = line.split(None, 6)
        assert len(parts) == 7, f"line {number}: five time fields, a user and a command"
        *times, user, command = parts
        for value, (low, high) in zip(times, RANGES, strict=True):
            assert FIELD.match(value), f"line {number}: bad time field {value!r}"
            for n in map(int, re.findall(r"\d+", value.split("/")[0])):
                assert low <= n <= high, f"line {number}: {n} outside {low}-{high}"
        assert re.fullmatch(r"[a-z_][a-z0-9_-]*", user), f"line {number}: {user!r} is not a user name"
        jobs.append((times, user, command))
    return env, jobs


def test_the_file_is_one_cron_accepts():
    assert re.fullmatch(r"[A-Za-z0-9_-]+", CRON_FILE.name)
    mode = CRON_FILE.stat().st_mode
    assert not mode & (stat.S_IWGRP | stat.S_IWOTH), "cron ignores group/other-writable files"
    env, jobs = parse(CRON_FILE.read_text())
    schedule = {" ".join(times): command for times, _, command in jobs}
    assert set(schedule) == {"15 2 * * *", "0 3 * * *", "30 3 * * *"}
    assert all(user == "root" for _, user, _ in jobs)
    assert (
        "cd /root/.openclaw/workspace/skills/mem0-integration && python3 memory_cleanup.py --execute"
        in (schedule["0 3 * * *"])
    ), "the cleanup runs the skill installed in the main workspace, as the seed does"
    assert "backup --keep 7" in schedule["15 2 * * *"]
    assert "memstrata consolidate --execute >> " in schedule["30 3 * * *"]
    assert env["MEMSTRATA_CONFIG"] == "/etc/memstrata/memstrata.yaml"


def test_the_parser_rejects_what_cron_rejects():
    for bad in ("0 3 * * * root cmd", "0 3 * * root cmd\n", "61 3 * * * root cmd\n", "0 3 * * * cmd-without-user\n"):
        try:
            parse(bad)
        except AssertionError:
            continue
        raise AssertionError(f"accepted {bad!r}")


def test_the_jobs_run(tmp_path, daemons):
    """Each command as `memstrata install --cron` writes it (this checkout, its venv, a demo root), on a
    fresh root: nothing but `memstrata init` made the log directory the redirects write to."""
    config = init_root(tmp_path)
    daemon = daemons(config)
    wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=90, what="L4 reachable")
    run_cli("add", "一条记忆", "--agent", "main", config=config)
    daemon.stop()  # the jobs open the store themselves (with the daemon running they go through it)
    loaded = load_config(config)
    text = render_cron(loaded, config, Path(sys.prefix), REPO_ROOT)
    env, jobs = parse(text)
    assert env["MEMSTRATA_CONFIG"] == str(config)
    logs = loaded.paths.audit_dir
    assert logs == tmp_path / "workspace" / "logs" / "security" and logs.is_dir()
    for _, _, command in jobs:
        assert "/opt/memstrata" not in command and "/root/.openclaw" not in command, command
        # cron's environment: the file's variables, no virtualenv on PATH
        run_env = {"HOME": str(tmp_path), "LANG": "C.UTF-8", **env}
        proc = subprocess.run(["/bin/sh", "-c", command], env=run_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    assert "execute: scanned" in (logs / "cleanup-cron.log").read_text()
    assert "backup   " in (logs / "backup-cron.log").read_text()
    assert "(execute): applied; scanned 1" in (logs / "consolidate-cron.log").read_text()
    assert len(list((tmp_path / "state" / "backups").iterdir())) == 1
    assert json.loads(run_cli("cleanup", "--dry-run", "--json", config=config).stdout)["scanned"] == 1
