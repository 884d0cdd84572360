"""Test helpers: a real daemon subprocess, deadlines instead of sleeps, git inspection."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

from daemon.front.daemon_client import DaemonClient, DaemonUnavailableError

T = TypeVar("T")
MEMSTRATA = [sys.executable, "-m", "daemon"]
REPO_ROOT = Path(__file__).resolve().parent.parent

# Fakes that match the guard's patterns; built at run time so this file holds no key-shaped text.
FAKE_API_KEY = "sk-" + "testkey" * 4 + "1234"
FAKE_AWS_KEY = "AKIA" + "ABCDEFGHIJKLMNOP"


def wait_for(condition: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "") -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except AssertionError:
            raise  # the condition itself decided the wait is hopeless
        except Exception as exc:
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what or condition}" + (f" ({last_exc!r})" if last_exc else "")
    )


def run_cli(
    *args: str, config: Path | None = None, env: dict | None = None, input: str | None = None, check: bool = True
):
    """Run the memstrata CLI as a real subprocess."""
    cmd = [*MEMSTRATA, *(["--config", str(config)] if config else []), *args]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, input=input, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def init_root(root: Path, **overrides: dict) -> Path:
    """``memstrata init --root``, then merge ``overrides`` (section → settings) into the config."""
    run_cli("init", "--root", str(root))
    config = root / "memstrata.yaml"
    if overrides:
        data = yaml.safe_load(config.read_text())
        for section, values in overrides.items():
            data.setdefault(section, {}).update(values)
        config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def registry_of(root: Path) -> Path:
    """Where ``init`` puts the project registry: the seed's path in the main workspace's skill."""
    return root / "workspace" / "skills" / "mem0-integration" / "project_registry.yaml"


FAST = {"watch": {"debounce_ms": 100}, "git": {"quiet_period_s": 0.3, "max_delay_s": 5}}
# FAST without vectors or L4, for tests of files and git (no model load, no store to open)
LEAN = {**FAST, "vectors": {"backend": "off"}, "conversation": {"enabled": False}}


_DICTIONARY = REPO_ROOT / ".cache" / "test-dictionary" / "dictionary.sqlite"


def seed_dictionary(state_dir: Path) -> None:
    """Give a test root's state directory the translation dictionary the daemon would otherwise build
    at its first start (a few CPU-seconds each time, in every test that starts a daemon): built once
    into ``.cache`` from the installed package, copied from there."""
    from layers.local.text.translate import DICTIONARY_FILE, Dictionary, DictionaryUnavailableError, build

    target = state_dir / DICTIONARY_FILE
    if target.exists():
        return
    try:
        Dictionary(_DICTIONARY).close()
    except DictionaryUnavailableError:
        build(_DICTIONARY)
    partial = target.with_name(target.name + ".seeding")
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copyfile(_DICTIONARY, partial)
        partial.replace(target)
    except OSError:  # a test's full or read-only disk: the daemon meets it as it would without the seed
        partial.unlink(missing_ok=True)


class DaemonProcess:
    """``memstrata run`` as a subprocess, with its stderr kept for assertions."""

    def __init__(self, config: Path, env: dict | None = None) -> None:
        self.config = config
        data = yaml.safe_load(config.read_text())
        root = config.parent
        self.socket = Path(data["paths"]["socket"].replace("{root}", str(root)))
        if not self.socket.is_absolute():
            self.socket = root / self.socket
        self.state_dir = Path(data["paths"]["state_dir"].replace("{root}", str(root)))
        if not self.state_dir.is_absolute():
            self.state_dir = root / self.state_dir
        self.log_path = config.parent / f"daemon-{time.monotonic_ns()}.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> DaemonProcess:
        seed_dictionary(self.state_dir)
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*MEMSTRATA, "--config", str(self.config), "run"], stdout=self._log, stderr=subprocess.STDOUT, env=self.env
        )
        if wait:
            wait_for(self._ready, timeout=60, what=f"daemon ready\n{self.log()}")
        return self

    def _ready(self) -> bool:
        if self.proc and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
        try:
            daemon = self.status()["daemon"]
            return bool(daemon["running"]) and not daemon.get("starting")  # every workspace checked
        except DaemonUnavailableError:
            return False

    def admin_token(self) -> str | None:
        from daemon.common.tokens import ADMIN_TOKEN_FILE, read_token

        return read_token(self.state_dir / ADMIN_TOKEN_FILE)

    def status(self, token: str | None = "admin") -> dict:
        """``GET /v1/status`` with the administrator's token (the full report), or ``token`` (None: none)."""
        token = self.admin_token() if token == "admin" else token
        with DaemonClient(self.socket, timeout=10, token=token) as client:
            return client.status()

    def agent(self, agent_id: str) -> dict:
        return next(a for a in self.status()["agents"] if a["id"] == agent_id)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
        return code


def git(workspace: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(workspace), *args], capture_output=True, text=True, check=True).stdout


def ref_of(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo``; None when there is no such ref."""
    run = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", ref], capture_output=True, text=True)
    return run.stdout.strip() or None


def bare_remote(path: Path) -> Path:
    """A bare repository at ``path`` keeping a reflog of every update (what a test of forced updates reads)."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    git(path, "config", "core.logAllRefUpdates", "always")
    return path


def commits(workspace: Path) -> list[dict]:
    """Commits newest first, each with its subject and its name-status lines."""
    out = git(workspace, "log", "--format=\x1e%H\x1f%s", "--name-status", "--no-renames")
    result = []
    for block in out.split("\x1e")[1:]:
        head, _, rest = block.partition("\n")
        sha, subject = head.split("\x1f")
        changes = [tuple(line.split("\t", 1)) for line in rest.strip().splitlines() if line.strip()]
        result.append({"sha": sha, "subject": subject, "changes": changes})
    return result


def committed(workspace: Path, status: str, path: str) -> bool:
    """True when some commit records ``status`` (A/M/D) for ``path``."""
    return any((status, path) in c["changes"] for c in commits(workspace))


def file_at_head(workspace: Path, path: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(workspace), "show", f"HEAD:{path}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def dump(data: object) -> str:
    return json.dumps(data, ensure_ascii=False)


def audit_events(root: Path) -> list[dict]:
    """Every line of the audit log of the root ``root`` (its ``workspace/logs/security``), oldest file first."""
    folder = root / "workspace" / "logs" / "security"
    return [
        json.loads(line)
        for path in sorted(folder.glob("memory-access-*.log"))
        for line in path.read_text().splitlines()
    ]


def token_of(root: Path, agent: str) -> str:
    """The API token the daemon issued to ``agent`` of the root ``init_root`` made."""
    workspace = root / "workspace" if agent == "main" else root / "workspace" / "agents" / f"{agent}-workspace"
    return (workspace / ".memstrata" / "token").read_text().strip()


def wait_reachable(daemon) -> None:
    """Until the daemon's L4 store answers (opening it takes seconds after the daemon is ready)."""
    wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=90, what="conversation store reachable")
