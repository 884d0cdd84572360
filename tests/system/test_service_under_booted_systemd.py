"""memstrata.service under a real, booted systemd, driven the way an operator drives it.

One container for the module (tests run in file order and build on each other, as an
operator's session does): `memstrata install`, `systemctl start`, agents added while it
runs (by the CLI and by hand, for an agent's own Unix user), the skill from a workspace,
reload, the watchdog, the backup/cleanup services right after a start, a stop with an
edit pending, `systemd-analyze security` of every installed service, and `memstrata uninstall`.

What this reproduced before the fixes (Debian bookworm, systemd 252): with
``CapabilityBoundingSet=`` empty, a workspace owned by its agent's user made the daemon
exit ("Permission denied: '.memstrata'") and systemd restart it forever;
``ExecReload=/bin/kill`` failed with 203/EXEC (a minimal Debian has no procps);
``systemctl start memstrata-backup.service`` right after a start failed "conversation
store unreachable: not connected yet".
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.system.container import checkout_env
from tests.system.operator import (
    AGENTS,
    CONFIG,
    MEMSTRATA,
    SERVICES,
    TEST_WATCHDOG_S,
    TIMERS,
    WORKSPACE,
    drop_in,
    install,
    main_pid,
    memstrata,
    status,
    systemctl,
    wait_inside,
)

pytestmark = pytest.mark.slow
MAX_EXPOSURE = 2.0


@pytest.fixture(scope="module")
def installed(container):
    """The container after `memstrata install`, the daemon not started yet (install does not start it)."""
    proc = install(container)
    assert "systemctl start memstrata" in proc.stdout, proc.stdout
    container.run("systemctl", "stop", "memstrata.service")  # started by nothing but a leftover drop-in
    return container


def test_install_enables_the_units_and_start_returns_once_ready(installed):
    c = installed
    assert c.run("systemctl", "is-enabled", "memstrata.service").stdout.strip() == "enabled"
    for timer in TIMERS:
        assert c.run("systemctl", "is-enabled", timer).stdout.strip() == "enabled"
    c.write(f"{WORKSPACE}/memory/ports.md", "# 端口\n\nQdrant 服务端口是 6333。\n")
    systemctl(c, "start", timeout=150)
    # Type=notify: start returned only after READY=1, so the service is up and says so at once
    shown = c.show("memstrata.service", "ActiveState", "SubState", "StatusText", "NRestarts", "Result")
    assert (shown["ActiveState"], shown["SubState"], shown["Result"]) == ("active", "running", "success"), shown
    assert re.search(r"\d+ agents?, \d+ files", shown["StatusText"]), shown
    assert "Status: " in c.run("systemctl", "status", "memstrata.service", check=False).stdout
    assert status(c)["daemon"]["pid"] == main_pid(c)


def test_the_journal_has_the_daemons_own_fields(installed):
    """Under systemd the daemon logs through journald's native protocol (daemon/common/logs.py):
    a commit of main's carries MEMSTRATA_AGENT= and EVENT= (a file of its own and a start of its own:
    the test stands alone under ``-k``; both are no-ops after the start test)."""
    c = installed
    c.write(f"{WORKSPACE}/memory/journal.md", "# journal\n\nthe daemon logs to journald natively.\n")
    systemctl(c, "start", timeout=150)
    wait_inside(
        c,
        "journalctl -u memstrata.service -o cat MEMSTRATA_AGENT=main EVENT=committed | grep -q 'committed'",
        timeout=60,
        what="a commit of main's in the journal with its fields",
    )
    line = c.run("/bin/sh", "-c", "journalctl -u memstrata.service -o json EVENT=committed -n 1").stdout
    entry = json.loads(line)
    assert (entry["SYSLOG_IDENTIFIER"], entry["PRIORITY"], entry["MEMSTRATA_AGENT"]) == ("memstrata", "6", "main")
    assert entry["LOGGER"] == "daemon.files.commits" and "committed" in entry["MESSAGE"], entry


def test_agent_add_while_running_keeps_the_daemon(installed):
    c = installed
    pid = main_pid(c)
    memstrata(c, "agent", "add", "coder", "--project", "demo")
    wait_inside(c, f"{_status_cmd()} | grep -q '\"coder\"'", timeout=60, what="the daemon to watch coder", interval=0.5)
    c.run("test", "-s", f"{AGENTS}/coder-workspace/.memstrata/token")
    shown = c.show("memstrata.service", "MainPID", "NRestarts", "ActiveState")
    assert (int(shown["MainPID"]), shown["NRestarts"], shown["ActiveState"]) == (pid, "0", "active"), shown


def test_a_workspace_made_by_hand_for_its_agents_own_user_gets_its_token(installed):
    """The crash-loop: the daemon writing into a workspace it does not own."""
    c = installed
    pid = main_pid(c)
    c.run("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "agentx")
    ws = f"{AGENTS}/x-workspace"
    c.sh(f"mkdir -p {ws}/memory && printf '# x\\n\\nx 的端口是 8080。\\n' > {ws}/MEMORY.md && chown -R agentx: {ws}")
    mode = wait_inside(c, f"stat -c '%a' {ws}/.memstrata/token", timeout=60, what="x's token", interval=0.5).strip()
    assert mode == "600", "readable by its owner alone from the first byte"
    # the workspace may be found between the mkdir and the chown: the token then goes to x once x owns it
    wait_inside(c, f"stat -c '%U %a' {ws}/.memstrata/token | grep -qx 'agentx 600'", timeout=90, what="x's own token")
    wait_inside(
        c,
        f"git -c safe.directory={ws} -C {ws} log --format=%s -- MEMORY.md | grep -q .",
        timeout=90,
        what="x's MEMORY.md committed",
        interval=0.5,
    )
    # everything the daemon made there (token, skill, the repository git wrote as root) is the agent's
    wait_inside(c, f'test -z "$(find {ws} ! -user agentx)"', timeout=30, what="x-workspace all agentx's")
    shown = c.show("memstrata.service", "MainPID", "NRestarts", "ActiveState")
    assert (int(shown["MainPID"]), shown["NRestarts"], shown["ActiveState"]) == (pid, "0", "active"), (
        shown,
        c.journal("memstrata.service", 80),
    )
    assert "cannot change file ownership" not in c.journal("memstrata.service", 500)


@pytest.mark.parametrize(
    ("workspace", "command", "expected"),
    [
        (WORKSPACE, "python3 local_search.py 端口", "6333"),
        (WORKSPACE, "python3 memory_cleanup.py --dry-run", "scanned"),
        (f"{AGENTS}/coder-workspace", "python3 mem0_client.py add 'coder 的 Redis 端口是 6380' --json", '"id"'),
        (f"{AGENTS}/coder-workspace", "python3 mem0_client.py search 'Redis 端口' --no-fallback", "6380"),
    ],
)
def test_the_skill_runs_from_a_workspace(installed, workspace, command, expected):
    """As the seed calls it: cd into the installed skill, any python3 (here Debian's own)."""
    c = installed
    skill = f"{workspace}/skills/mem0-integration"
    wait_inside(c, f"{_status_cmd()} | grep -q '\"coder\"'", timeout=30, what="the daemon up")
    deadline = time.monotonic() + 60
    while True:  # the index may take a moment to hold the file written at start
        proc = c.sh(f"cd {skill} && {command}", check=False, timeout=120)
        if proc.returncode == 0 and expected in proc.stdout:
            break
        assert time.monotonic() < deadline, f"{command} in {skill}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        time.sleep(1)
    assert "Traceback" not in proc.stderr, proc.stderr


def test_reload_keeps_the_pid(installed):
    c = installed
    pid = main_pid(c)
    c.run("systemctl", "reload", "memstrata.service")
    wait_inside(
        c,
        "journalctl -u memstrata.service -o cat | grep -q 'configuration reloaded'",
        timeout=30,
        what="the reload logged",
    )
    shown = c.show("memstrata.service", "MainPID", "ActiveState")
    assert (int(shown["MainPID"]), shown["ActiveState"]) == (pid, "active"), shown


def test_a_stopped_daemon_is_restarted_by_the_watchdog(installed):
    c = installed
    # test-only: the shipped WatchdogSec=30s would cost this test 30 s; the mechanism is the same
    drop_in(c, "memstrata.service", "test-watchdog", f"WatchdogSec={TEST_WATCHDOG_S}s\n")
    systemctl(c, "restart", timeout=150)
    pid = main_pid(c)
    restarts = int(c.show("memstrata.service", "NRestarts")["NRestarts"])
    c.sh(f"kill -STOP {pid}")  # the shell's kill: no procps here
    wait_inside(
        c,
        f'test "$(systemctl show -P NRestarts memstrata.service)" -gt {restarts}'
        " && systemctl is-active -q memstrata.service",
        timeout=TEST_WATCHDOG_S + 60,
        what="a watchdog restart",
        interval=0.5,
    )
    assert main_pid(c) != pid
    assert "Failed with result 'watchdog'" in c.journal("memstrata.service", 300)


@pytest.mark.parametrize(
    "service", ["memstrata-backup.service", "memstrata-cleanup.service", "memstrata-consolidate.service"]
)
def test_backup_and_cleanup_started_right_after_the_daemon_succeed(installed, service):
    """What Persistent=true timers do at boot: run while the daemon is still opening the store."""
    c = installed
    systemctl(c, "restart", timeout=150)
    proc = c.run("systemctl", "start", service, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr + c.journal(service, 40) + c.journal("memstrata.service", 40)
    shown = c.show(service, "Result", "ExecMainStatus")
    assert (shown["Result"], shown["ExecMainStatus"]) == ("success", "0"), shown


def test_stop_with_an_edit_pending_commits_it_and_exits_0_in_time(installed):
    c = installed
    c.run("systemctl", "is-active", "-q", "memstrata.service")
    timeout = c.show("memstrata.service", "TimeoutStopUSec")["TimeoutStopUSec"]
    c.sh(f"echo '停止前的最后一行' >> {WORKSPACE}/MEMORY.md")
    assert "停止前的最后一行" not in c.run("git", "-C", WORKSPACE, "show", "HEAD:MEMORY.md").stdout, "still pending"
    started = time.monotonic()
    c.run("systemctl", "stop", "memstrata.service", timeout=60)
    took = time.monotonic() - started
    shown = c.show("memstrata.service", "Result", "ExecMainStatus", "ActiveState")
    assert shown == {"Result": "success", "ExecMainStatus": "0", "ActiveState": "inactive"}, shown
    assert took < _seconds(timeout), f"stop took {took:.1f} s, TimeoutStopSec={timeout}"
    shown_head = c.run("git", "-C", WORKSPACE, "show", "HEAD:MEMORY.md").stdout
    assert "停止前的最后一行" in shown_head, c.journal("memstrata.service", 60)


@pytest.mark.parametrize(
    "service", ["memstrata-backup.service", "memstrata-cleanup.service", "memstrata-consolidate.service"]
)
def test_backup_and_cleanup_run_while_the_daemon_is_stopped(installed, service):
    """A timer firing while the daemon is down: the runtime directory the units may write is
    gone then, and the job opens the store itself."""
    c = installed
    c.run("systemctl", "stop", "memstrata.service", timeout=60)
    assert c.run("test", "-e", "/run/memstrata", check=False).returncode != 0, "runtime directory removed"
    proc = c.run("systemctl", "start", service, check=False, timeout=600)
    assert proc.returncode == 0, (
        proc.stderr + _folded(c.journal(service, 40) + c.journal("memstrata.service", 20)) + _store_files(c)
    )
    shown = c.show(service, "Result", "ExecMainStatus")
    assert (shown["Result"], shown["ExecMainStatus"]) == ("success", "0"), shown


def _folded(text: str, width: int = 160) -> str:
    """Long lines (an engine's error names whole paths) cut into pieces a CI report keeps whole."""
    return "\n".join(line[i : i + width] for line in text.splitlines() for i in range(0, max(len(line), 1), width))


def _store_files(c) -> str:
    """The L4 store's files: what a job that could not open it met."""
    listing = c.run("find", "/var/lib/memstrata/conversation", "-maxdepth", "8", check=False).stdout
    return "\nstore files:\n" + _folded(listing)


BULK_NOTES = """
import datetime, pathlib, sys
memory = pathlib.Path(sys.argv[1])
start = datetime.date(2024, 1, 1)
for n in range(160):
    day = start + datetime.timedelta(days=n)
    body = "检索服务的部署记录 deployment notes for the index " * 30
    sections = [f"## 第 {k} 段 build{n}x{k}\\n\\n{body}" for k in range(6)]
    (memory / f"{day.isoformat()}.md").write_text(f"# {day}\\n\\n" + "\\n".join(sections), encoding="utf-8")
"""


def test_a_first_index_past_a_megabyte_is_built_with_its_helper_inside_the_unit(installed):
    """A fresh build past 1 MB of notes shares its chunking and tokenizing with a helper process
    (layers/local/storage/build_helper.py): it starts and answers inside the service's sandbox, and the
    index it builds answers a search for a word of the last note."""
    c = installed
    systemctl(c, "start", timeout=150)
    python = str(Path(MEMSTRATA).with_name("python"))
    c.run(python, "-c", BULK_NOTES, f"{WORKSPACE}/memory")
    deadline = time.monotonic() + 180
    while _main_index(c)["files"] < 160:  # the watcher commits and indexes them first, one by one
        assert time.monotonic() < deadline, (_main_index(c), c.journal("memstrata.service", 60))
        time.sleep(1)
    since = c.run("date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    rebuilt = json.loads(memstrata(c, "reindex", "--agent", "main", "--rebuild", "--json", timeout=300).stdout)
    assert rebuilt["main"]["rebuilt"] and rebuilt["main"]["files"] >= 160, rebuilt
    journal = c.run("journalctl", "--no-pager", "-u", "memstrata.service", "--since", since).stdout
    assert re.search(r"index build: past \d+ characters, helper process \d+", journal), journal[-3000:]
    assert "helper stopped" not in journal and "no helper process" not in journal, journal[-3000:]
    found = json.loads(memstrata(c, "search", "build159x5", "--agent", "main", "--mode", "fts", "--json").stdout)
    assert found["results"] and found["results"][0]["path"] == "memory/2024-06-08.md", found


@pytest.mark.parametrize("service", SERVICES)
def test_every_installed_service_is_exposed_at_most_2(installed, service):
    """The real assessment, by the booted systemd, of the unit as installed."""
    out = installed.run("systemd-analyze", "security", "--no-pager", service).stdout
    match = re.search(rf"Overall exposure level for {re.escape(service)}: (\d+\.\d)", out)
    assert match, out
    assert float(match.group(1)) <= MAX_EXPOSURE, out


def test_every_installed_unit_verifies_without_warnings(installed):
    units = [f"/etc/systemd/system/{u}" for u in (*SERVICES, *TIMERS)]
    proc = installed.run("systemd-analyze", "verify", *units, check=False)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr


def test_uninstall_stops_and_removes_the_units_and_keeps_the_data(installed):
    """Last: what `memstrata uninstall` leaves on a booted system (run twice: idempotent)."""
    c = installed
    systemctl(c, "start", timeout=150)
    for _ in range(2):
        proc = c.run(MEMSTRATA, "uninstall", "--config", CONFIG, env=checkout_env(), check=False, timeout=120)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert c.run("systemctl", "is-active", "memstrata.service", check=False).stdout.strip() in ("inactive", "failed")
    for unit in (*SERVICES, *TIMERS):
        c.run("test", "!", "-e", f"/etc/systemd/system/{unit}")
    c.run("test", "-s", CONFIG)
    c.run("test", "-s", f"{AGENTS}/coder-workspace/.memstrata/token")
    assert "停止前的最后一行" in c.run("git", "-C", WORKSPACE, "show", "HEAD:MEMORY.md").stdout
    c.run("test", "-d", "/var/lib/memstrata")


def _main_index(c) -> dict:
    return next(agent["index"] for agent in status(c)["agents"] if agent["id"] == "main")


def _status_cmd() -> str:
    env = " ".join(f"{k}={v}" for k, v in checkout_env().items())
    return f"{env} {MEMSTRATA} --config {CONFIG} status --json"


def _seconds(value: str) -> float:
    """systemd's "15s" / "1min 30s" / "500ms"."""
    units = {"ms": 0.001, "s": 1, "min": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|min|s|h)", value))
