"""The memory-memstrata plugin's host: a real OpenClaw (tests/openclaw_install.py) with what only the plugin needs.

tests/openclaw_install.py runs OpenClaw: where ``make test-deps`` installed it (skipped, or failed under
``make test``, when it is not), its isolated environment, its commands, its gateway (start, readiness,
stop, ``/tools/invoke``).  Here, on top: a stand-in model endpoint (tests/plugins/stand_in_chat.py) that
onboard names so a real turn can run, memstrata's daemon on OpenClaw's state dir, the plugin installed
with the operator's steps (README), and the gateway kept running for a whole module.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

import yaml

from tests.helpers import REPO_ROOT, DaemonProcess, run_cli, wait_reachable
from tests.openclaw_install import Gateway, OpenClaw, file_hashes, free_port, openclaw_argv
from tests.plugins.stand_in_chat import StandInChat

PLUGIN_DIR = REPO_ROOT / "plugins" / "openclaw-memory-memstrata"
GATEWAY_TOKEN = "plugin-test-gateway-token"


def table_rows(db: Path) -> dict[str, dict[str, str]]:
    """Each table of an SQLite database (read-only): its rows by hash, each row as text (a test reads
    OpenClaw's database with it: whether a row names memstrata)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        names = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        tables = {}
        for name in names:
            rows = [repr(row) for row in con.execute(f'SELECT * FROM "{name}"')]
            tables[name] = {hashlib.sha256(r.encode()).hexdigest(): r for r in rows}
        return tables


def node_argv() -> list[str]:
    """The Node that runs OpenClaw (the plugin's own unit tests run on it); skipped as OpenClaw is."""
    return openclaw_argv()[:1]


class PluginHost(OpenClaw):
    """An OpenClaw state dir made by ``onboard`` (its model the stand-in) and ``agents add research``,
    memstrata's daemon on it, the plugin installed with ``openclaw plugins install``, its gateway on
    loopback; :attr:`before` holds OpenClaw's files as they were before memstrata came."""

    def __init__(self, home: Path) -> None:
        config = home / ".openclaw" / "memstrata.yaml"
        super().__init__(home, MEMSTRATA_CONFIG=str(config), NO_COLOR="1")  # the CLI's way of finding it
        self.memstrata_config = config
        self.chat = StandInChat()
        self.port = free_port()
        self.daemon: DaemonProcess | None = None
        self.served: Gateway | None = None
        self.before: dict[str, str] = {}
        self.config_before: dict = {}
        self._gateway = contextlib.ExitStack()

    def workspace(self, agent: str) -> Path:
        main = self.state / "workspace"
        return main if agent == "main" else main / agent  # `agents add` puts it inside main's

    def build(self, notes: dict[str, str]) -> PluginHost:
        self.onboard(
            "--mode", "local",
            "--auth-choice", "custom-api-key", "--custom-base-url", self.chat.base_url,
            "--custom-model-id", "stand-in", "--custom-api-key", "stand-in-key",
            "--gateway-auth", "token", "--gateway-token", GATEWAY_TOKEN, "--gateway-port", str(self.port),
            "--gateway-bind", "loopback", "--no-install-daemon",
        )  # fmt: skip
        self.add_agent("research", role="researcher")
        for agent, text in notes.items():
            (self.workspace(agent) / "MEMORY.md").write_text(text)
        self.before, self.config_before = file_hashes(self.state), self.config()
        run_cli("init", "--root", str(self.state), env={"HOME": str(self.home)})
        data = yaml.safe_load(self.memstrata_config.read_text())
        data["vectors"] = {"backend": "off"}  # full-text L3; L4 keeps its own embedder
        data["watch"]["debounce_ms"] = 100
        self.memstrata_config.write_text(yaml.safe_dump(data, sort_keys=False))
        self.daemon = DaemonProcess(self.memstrata_config).start()
        wait_reachable(self.daemon)
        self.run("plugins", "install", "--force", "--accept-capabilities", str(PLUGIN_DIR))
        # The operator's second step (README): memory-core keeps memory_search/memory_get beside a slot owner.
        # The hooks are off by default; this host turns them on (and grants them the conversation access
        # OpenClaw requires of a non-bundled plugin's prompt hooks).
        self.run(
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

    def start_gateway(self) -> Gateway:
        """The gateway on the port and with the token onboard wrote (``openclaw agent`` finds it there)."""
        self.served = self._gateway.enter_context(self.gateway(self.port, GATEWAY_TOKEN))
        return self.served

    def stop_gateway(self) -> None:
        self._gateway.close()
        self.served = None

    def invoke(self, tool: str, agent: str, args: dict) -> tuple[int, dict]:
        """``POST /tools/invoke`` as the operator, for ``agent``: (HTTP status, the JSON answer)."""
        assert self.served is not None, "the gateway is not running"
        return self.served.invoke(tool, args, agentId=agent)

    def details(self, tool: str, agent: str, args: dict) -> dict:
        """The tool's result (``details``), failing the test unless the call was a 200."""
        status, answer = self.invoke(tool, agent, args)
        assert status == 200 and answer.get("ok"), (status, answer)
        return answer["result"]["details"]

    def close(self) -> None:
        self.stop_gateway()
        if self.daemon is not None and self.daemon.proc and self.daemon.proc.poll() is None:
            self.daemon.stop()
        self.chat.close()
