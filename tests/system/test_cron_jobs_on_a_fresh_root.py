"""The shipped cron.d/mem0-cleanup, run by Debian's real cron in a booted system, on a fresh root.

`memstrata install --cron` on a machine with nothing of memstrata yet writes
/etc/cron.d/mem0-cleanup with this installation's paths; the test then rewrites only
the time fields (every minute instead of 02:15 and 03:00) and lets cron run both jobs.
cron runs with ``-L 15`` (the rootfs recipe), so a job that exits non-zero is logged as
"failed"; a job whose output is not redirected shows as "No MTA installed, discarding
output".

Reproduced before the fix (the shipped lines on a root made by `memstrata init`): both
jobs' redirect into the missing logs/security directory failed before memstrata started;
cron logged only "(CRON) info (No MTA installed, discarding output)" and no log file
was ever written.
"""

from __future__ import annotations

import re

import pytest

from tests.system.container import checkout_env
from tests.system.operator import WORKSPACE, install, memstrata, systemctl, wait_inside

pytestmark = pytest.mark.slow
CRON_FILE = "/etc/cron.d/mem0-cleanup"
LOGS = f"{WORKSPACE}/logs/security"
CRON_COMPLAINTS = re.compile(r"bad |WRONG|failed|INSECURE|Missing newline|discarding output|Error", re.IGNORECASE)


@pytest.fixture(scope="module")
def scheduled(container):
    """A fresh root installed for cron, the daemon running, one memory stored, the jobs due every minute."""
    c = container
    c.run("systemctl", "is-active", "cron.service")
    c.run("test", "!", "-e", "/root/.openclaw")  # fresh: nothing of memstrata yet
    install(c, "--cron")
    shipped = c.read(CRON_FILE)
    assert "memstrata backup --keep 7" in shipped and "memory_cleanup.py --execute" in shipped, shipped
    systemctl(c, "start", timeout=150)
    wait_inside(
        c,
        _reachable_cmd(),
        timeout=120,
        what="the conversation store reachable",
        interval=1,
    )
    memstrata(c, "add", "一条记忆", "--agent", "main")
    every_minute = re.sub(r"(?m)^(\d+) (\d+) \* \* \* ", "* * * * * ", shipped)
    assert every_minute.count("* * * * * root ") == 3, every_minute  # backup, cleanup, consolidate
    env = checkout_env()  # test-only, empty in CI: this worktree's code (see tests/system/operator.py)
    if env:
        every_minute = every_minute.replace(
            "\nMEMSTRATA_CONFIG=", "".join(f"\n{k}={v}" for k, v in env.items()) + "\nMEMSTRATA_CONFIG=", 1
        )
    c.write(CRON_FILE, every_minute, mode=0o644)
    return c


def test_every_job_runs_and_writes_its_log(scheduled):
    c = scheduled
    wait_inside(
        c,
        f"grep -q 'execute: scanned' {LOGS}/cleanup-cron.log && grep -q 'backup ' {LOGS}/backup-cron.log"
        f" && grep -q '(execute): applied; scanned' {LOGS}/consolidate-cron.log",
        timeout=150,
        what="the backup, cleanup and consolidate cron jobs to have run",
        interval=2,
    )
    backups = c.run("sh", "-c", "ls /var/lib/memstrata/backups").stdout.split()
    assert backups, "the backup job made a snapshot"


def test_the_cleanup_writes_its_audit_line(scheduled):
    c = scheduled
    today = c.run("date", "+%Y-%m-%d").stdout.strip()
    audit = wait_inside(
        c, f"cat {LOGS}/memory-cleanup-{today}.log", timeout=150, what="the cleanup's audit file", interval=2
    )
    assert audit.strip(), "the audit file has a line"


def test_cron_logged_no_complaint(scheduled):
    c = scheduled
    wait_inside(
        c,
        "test $(journalctl -u cron.service -o cat | grep -c 'CMD (') -ge 2",
        timeout=150,
        what="cron to log both jobs",
        interval=2,
    )
    log = c.journal("cron.service", 500)
    complaints = [line for line in log.splitlines() if CRON_COMPLAINTS.search(line)]
    assert not complaints, log


def _reachable_cmd() -> str:
    from tests.system.operator import CONFIG, MEMSTRATA

    env = " ".join(f"{k}={v}" for k, v in checkout_env().items())
    return (
        f"{env} {MEMSTRATA} --config {CONFIG} status --json"
        ' | python3 -c \'import json,sys; sys.exit(not json.load(sys.stdin)["conversation"]["reachable"])\''
    )
