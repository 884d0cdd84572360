"""What an operator types inside the booted container, and the test-only adjustments around it.

Everything goes through the commands the README gives (``memstrata install``,
``systemctl``, ``journalctl``); the only additions are drop-ins named ``test-*.conf``
that this module writes and documents:

- ``test-checkout.conf`` (only when this checkout shares another checkout's virtualenv,
  as a git worktree does): PYTHONPATH so the units run this checkout's code, as the
  tests' working directory does on the host.  Never written in CI.
- ``test-watchdog.conf``: a shorter WatchdogSec for the watchdog test, which would
  otherwise wait the shipped 30 s; the mechanism under test is the same.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tests.helpers import REPO_ROOT
from tests.system.container import Container, ContainerError, checkout_env

MEMSTRATA = str(REPO_ROOT / ".venv" / "bin" / "memstrata")
ROOT = "/root/.openclaw"
CONFIG = "/etc/memstrata/memstrata.yaml"
WORKSPACE = f"{ROOT}/workspace"
AGENTS = f"{WORKSPACE}/agents"
SERVICES = (
    "memstrata.service",
    "memstrata-backup.service",
    "memstrata-cleanup.service",
    "memstrata-consolidate.service",
)
TIMERS = ("memstrata-backup.timer", "memstrata-cleanup.timer", "memstrata-consolidate.timer")
TEST_WATCHDOG_S = 5


def memstrata(c: Container, *args: str, check: bool = True, timeout: float = 180, **kwargs):
    """``memstrata --config CONFIG ARGS`` inside, as root."""
    return c.run(MEMSTRATA, "--config", CONFIG, *args, check=check, timeout=timeout, env=checkout_env(), **kwargs)


def install(c: Container, *extra: str):
    """``memstrata install`` the way the README says, then the checkout drop-in if needed."""
    proc = c.run(MEMSTRATA, "install", "--root", ROOT, "--config", CONFIG, *extra, env=checkout_env(), timeout=300)
    env = checkout_env()
    if env:
        for unit in SERVICES:
            drop_in(c, unit, "test-checkout", "".join(f"Environment={k}={v}\n" for k, v in env.items()))
    return proc


def drop_in(c: Container, unit: str, name: str, service_lines: str) -> None:
    """A ``[Service]`` drop-in for ``unit`` (systemctl daemon-reload included)."""
    c.write(f"/etc/systemd/system/{unit}.d/{name}.conf", "[Service]\n" + service_lines)
    c.run("systemctl", "daemon-reload")


def systemctl(c: Container, verb: str, unit: str = "memstrata.service", timeout: float = 240) -> None:
    """``systemctl VERB UNIT`` inside; a failed job raises with the unit's status and journal, which
    systemctl's own message only points at (a start that failed in CI said nothing more)."""
    try:
        c.run("systemctl", verb, unit, timeout=timeout)
    except ContainerError as error:
        state = c.run("systemctl", "status", "--no-pager", "-l", unit, check=False).stdout
        raise ContainerError(f"{error}\nstatus:\n{state}\njournal:\n{c.journal(unit, 120)}") from None


def main_pid(c: Container, unit: str = "memstrata.service") -> int:
    return int(c.show(unit, "MainPID")["MainPID"])


def status(c: Container) -> dict:
    return json.loads(memstrata(c, "status", "--json").stdout)


def wait_inside(c: Container, script: str, timeout: float, what: str, interval: float = 0.3) -> str:
    """Poll a shell condition inside until it exits 0; its stdout.  Fails at the deadline with the last output."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = c.run("/bin/sh", "-c", script, check=False)
        if last.returncode == 0:
            return last.stdout
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what}"
        + (f"\nstdout: {last.stdout}\nstderr: {last.stderr}" if last else "")
        + f"\njournal:\n{c.journal('memstrata.service', 60)}"
    )


def poll(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    """``check()`` until it returns something true, which is returned; a command failing inside, a timeout or a
    missing key counts as not yet.  At the deadline, the last answer or failure is in the message."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = result
        except (ContainerError, subprocess.TimeoutExpired, KeyError, ValueError, StopIteration) as error:
            last = error
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}: {last}")
