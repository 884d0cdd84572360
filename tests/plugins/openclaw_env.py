"""Where the real OpenClaw is for these tests, and a host built with its own commands.

``make test-deps`` installs Node and OpenClaw into ``.cache/openclaw/`` (tests/openclaw_install.py,
``openclaw_argv()``); until that helper is there, the scratch install this plugin was developed against
(/work/scratch-oc) stands in. Without either the tests are skipped, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from tests.helpers import REPO_ROOT, DaemonProcess, run_cli, wait_for, wait_reachable
from tests.plugins.stand_in_chat import StandInChat

PLUGIN_DIR = REPO_ROOT / "plugins" / "openclaw-memory-memstrata"
SCRATCH_NODE = Path("/work/scratch-oc/n/node_modules/.bin/node")
SCRATCH_OPENCLAW = Path("/work/scratch-oc/oc/node_modules/openclaw/openclaw.mjs")
GATEWAY_TOKEN = "plugin-test-gateway-token"


def openclaw_argv() -> list[str] | None:
    """``[node, openclaw.mjs]`` of the installed OpenClaw, or None when there is none."""
    with contextlib.suppress(ImportError):
        from tests import openclaw_install  # type: ignore[attr-defined]  # the harness branch's helper

        with contextlib.suppress(Exception):
            argv = openclaw_install.openclaw_argv()
            if argv:
                return [str(a) for a in argv]
    if SCRATCH_NODE.exists() and SCRATCH_OPENCLAW.exists():
        return [str(SCRATCH_NODE), str(SCRATCH_OPENCLAW)]
    return None


def node_argv() -> list[str] | None:
    """The Node that runs OpenClaw (the plugin's own unit tests run on it)."""
    argv = openclaw_argv()
    return argv[:1] if argv else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OpenClawHost:
    """An OpenClaw state dir made by ``onboard`` and ``agents add``, memstrata's daemon on it, the plugin
    installed with ``openclaw plugins install``, and the gateway on loopback."""

    def __init__(self, home: Path) -> None:
        argv = openclaw_argv()
        assert argv is not None
        self.argv = argv
        self.home = home
        self.state = home / ".openclaw"
        self.chat = StandInChat()
        self.port = free_port()
        self.memstrata_config = self.state / "memstrata.yaml"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCLAW_", "MEMSTRATA_"))}
        self.env = {
            **clean,
            "HOME": str(home),
            "PATH": f"{Path(argv[0]).parent}:{clean.get('PATH', '')}",
            "MEMSTRATA_CONFIG": str(self.memstrata_config),  # found as the CLI finds it
            "NO_COLOR": "1",
        }
        self.daemon: DaemonProcess | None = None
        self.gateway: subprocess.Popen | None = None
        self.gateway_log = home / "gateway.log"

    def openclaw(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*self.argv, *args], env=self.env, cwd=self.home, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"openclaw {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def workspace(self, agent: str) -> Path:
        main = self.state / "workspace"
        return main if agent == "main" else main / agent  # `agents add` puts it inside main's

    def build(self, notes: dict[str, str]) -> OpenClawHost:
        self.openclaw(
            "onboard", "--non-interactive", "--accept-risk", "--mode", "local",
            "--auth-choice", "custom-api-key", "--custom-base-url", self.chat.base_url,
            "--custom-model-id", "stand-in", "--custom-api-key", "stand-in-key",
            "--gateway-auth", "token", "--gateway-token", GATEWAY_TOKEN, "--gateway-port", str(self.port),
            "--gateway-bind", "loopback", "--no-install-daemon", "--skip-health",
        )  # fmt: skip
        self.openclaw("agents", "add", "research", "--role", "researcher", "--non-interactive")
        run_cli("init", "--root", str(self.state), env={"HOME": str(self.home)})
        data = yaml.safe_load(self.memstrata_config.read_text())
        data["vectors"] = {"backend": "off"}  # full-text L3; L4 keeps its own embedder
        data["watch"]["debounce_ms"] = 100
        self.memstrata_config.write_text(yaml.safe_dump(data, sort_keys=False))
        for agent, text in notes.items():
            (self.workspace(agent) / "MEMORY.md").write_text(text)
        self.daemon = DaemonProcess(self.memstrata_config).start()
        wait_reachable(self.daemon)
        self.openclaw("plugins", "install", "--force", "--accept-capabilities", str(PLUGIN_DIR))
        # The operator's second step (README): memory-core keeps memory_search/memory_get beside a slot owner.
        # The hooks are off by default; this host turns them on (and grants them the conversation access
        # OpenClaw requires of a non-bundled plugin's prompt hooks).
        self.openclaw(
            "config", "set", "--batch-json",
            json.dumps([
                {"path": "plugins.entries.memory-core.enabled", "value": False},
                {"path": "plugins.entries.memory-memstrata.hooks.allowConversationAccess", "value": True},
                {"path": "plugins.entries.memory-memstrata.config.autoRecall", "value": True},
                {"path": "plugins.entries.memory-memstrata.config.autoCapture", "value": True},
            ]),
        )  # fmt: skip
        self.start_gateway()
        return self

    def start_gateway(self) -> None:
        log = open(self.gateway_log, "ab")  # noqa: SIM115 - closed with the process
        self.gateway = subprocess.Popen(
            [*self.argv, "gateway", "run", "--port", str(self.port)],
            env=self.env, cwd=self.home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

        def up() -> bool:
            if self.gateway is not None and self.gateway.poll() is not None:
                raise AssertionError(f"the gateway exited ({self.gateway.returncode}):\n{self.log()[-4000:]}")
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
                return r.status == 200

        wait_for(up, timeout=240, interval=1, what="the OpenClaw gateway's /healthz")

    def log(self) -> str:
        return self.gateway_log.read_text(errors="replace") if self.gateway_log.exists() else ""

    def invoke(self, tool: str, agent: str, args: dict) -> tuple[int, dict]:
        """``POST /tools/invoke`` as the operator, for ``agent``: (HTTP status, the JSON answer)."""
        body = json.dumps({"tool": tool, "agentId": agent, "args": args}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/tools/invoke",
            data=body,
            headers={"Authorization": f"Bearer {GATEWAY_TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def details(self, tool: str, agent: str, args: dict) -> dict:
        """The tool's result (``details``), failing the test unless the call was a 200."""
        status, answer = self.invoke(tool, agent, args)
        assert status == 200 and answer.get("ok"), (status, answer)
        return answer["result"]["details"]

    def close(self) -> None:
        if self.gateway is not None and self.gateway.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.gateway.pid, signal.SIGTERM)
            try:
                self.gateway.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.gateway.pid, signal.SIGKILL)
                self.gateway.wait()
        if self.daemon is not None and self.daemon.proc and self.daemon.proc.poll() is None:
            self.daemon.stop()
        self.chat.close()
