"""The service unit passes systemd's own checks (systemd-analyze, offline)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.helpers import REPO_ROOT

UNIT = REPO_ROOT / "systemd" / "memstrata.service"
INSTALLED_BINARY = "/opt/memstrata/.venv/bin/memstrata"


@pytest.fixture
def unit(tmp_path):
    """The unit with ExecStart pointing at this checkout's binary (verify checks it exists)."""
    assert shutil.which("systemd-analyze"), "systemd-analyze missing: `make setup` installs the systemd package"
    binary = REPO_ROOT / ".venv" / "bin" / "memstrata"
    assert binary.exists()
    text = UNIT.read_text()
    assert INSTALLED_BINARY in text
    path = tmp_path / "memstrata.service"
    path.write_text(text.replace(INSTALLED_BINARY, str(binary)))
    return path


TIMERS = {
    "memstrata-cleanup": "*-*-* 03:00:00 UTC",
    "memstrata-backup": "*-*-* 02:15:00 UTC",
    "memstrata-consolidate": "*-*-* 03:30:00 UTC",
}


@pytest.mark.parametrize("name", sorted(TIMERS))
def test_timer_and_its_service_verify_without_warnings(tmp_path, name):
    """The cron alternative: a oneshot service and its daily, persistent timer."""
    binary = REPO_ROOT / ".venv" / "bin" / "memstrata"
    service = (REPO_ROOT / "systemd" / f"{name}.service").read_text()
    timer = (REPO_ROOT / "systemd" / f"{name}.timer").read_text()
    assert INSTALLED_BINARY in service and "Type=oneshot" in service
    assert f"OnCalendar={TIMERS[name]}" in timer and "Persistent=true" in timer
    (tmp_path / f"{name}.service").write_text(service.replace(INSTALLED_BINARY, str(binary)))
    (tmp_path / f"{name}.timer").write_text(timer)
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / f"{name}.timer"), str(tmp_path / f"{name}.service")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    calendar = subprocess.run(["systemd-analyze", "calendar", TIMERS[name]], capture_output=True, text=True)
    assert calendar.returncode == 0 and "Next elapse" in calendar.stdout


def test_unit_verifies_without_warnings(unit):
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


@pytest.mark.parametrize("name", ["memstrata", "memstrata-backup", "memstrata-cleanup", "memstrata-consolidate"])
def test_service_security_exposure_is_at_most_2(tmp_path, name):
    """Hardened units: every unit scores at most 2.0 (tests/system checks the installed units in a booted systemd)."""
    binary = REPO_ROOT / ".venv" / "bin" / "memstrata"
    path = tmp_path / f"{name}.service"
    path.write_text((REPO_ROOT / "systemd" / f"{name}.service").read_text().replace(INSTALLED_BINARY, str(binary)))
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", str(path)], capture_output=True, text=True)
    match = re.search(rf"Overall exposure level for {name}\.service: (\d+\.\d)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    assert float(match.group(1)) <= 2.0, proc.stdout


def test_the_daemon_may_write_and_chown_in_workspaces_it_does_not_own():
    """Workspaces may belong to each agent's Unix user: without these the daemon exits on the first
    one (EACCES), and what it creates there (the agent's own token) is not the agent's."""
    text = UNIT.read_text()
    caps = re.findall(r"^CapabilityBoundingSet=(.*)$", text, re.MULTILINE)
    assert caps == ["CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER"], caps
    filters = re.findall(r"^SystemCallFilter=(.*)$", text, re.MULTILINE)
    assert filters[-1] == "@chown", "allowed back after ~@privileged (a later line wins)"
    assert not re.search(r"^ExecReload=/bin/kill", text, re.MULTILINE), "a minimal Debian has no /bin/kill"


def test_unit_has_the_promised_service_settings():
    text = UNIT.read_text()
    for setting in (
        "Type=notify",
        "Restart=on-failure",
        "WatchdogSec=",
        "RuntimeDirectory=memstrata",
        "StateDirectory=memstrata",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/root/.openclaw",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "MemoryMax=",
    ):
        assert setting in text, setting


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO_ROOT / ".ci" / "run").read_text()
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make run" in readme and "make test" in readme


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|min)?", value.strip())
    assert match, f"not a plain duration: {value!r}"
    return float(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_stop_timeout_exceeds_the_daemons_stop_budget_and_the_comment_agrees():
    """systemd must not SIGKILL a daemon that keeps its promise; the unit's comment states that promise."""
    from daemon.service.stop import STOP_BUDGET_S, STOP_SHARES_S

    text = UNIT.read_text()
    timeouts = re.findall(r"^TimeoutStopSec=(.+)$", text, re.MULTILINE)
    assert len(timeouts) == 1, timeouts
    timeout = _seconds(timeouts[0])
    assert timeout >= STOP_BUDGET_S + 5, f"TimeoutStopSec={timeout:g}s leaves no margin over {STOP_BUDGET_S:g} s"
    comment = re.search(r"stop budget of (\d+(?:\.\d+)?) s \(STOP_BUDGET_S", text)
    assert comment, "the unit's comment must state the daemon's stop budget"
    assert float(comment.group(1)) == STOP_BUDGET_S
    margin = re.search(r"systemd waits (\d+(?:\.\d+)?) s more", text)
    assert margin and float(margin.group(1)) == timeout - STOP_BUDGET_S
    assert sum(share for _, share in STOP_SHARES_S) == STOP_BUDGET_S
    assert STOP_SHARES_S[0][0] == "final commits", "the final commits come first"
    assert STOP_BUDGET_S <= 10, "SIGTERM ends the daemon within 10 s (the README's promise)"
