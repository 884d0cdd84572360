"""The seam between the front (CLI, MCP server, status, the skill) and the service, checked cheaply.

No daemon is started but one (what a call through it imports): fresh interpreters for what
an import loads, the API app in-process (starlette's TestClient) for how errors become
statuses, and the documents and texts the front shares with the service compared with
their one definition.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from daemon.api.app import INTERNAL_ERROR, build_app
from daemon.api.fairness import Courtesy
from daemon.common import contracts
from daemon.common.config import ConfigFile, demo_config_text, load_config, parse_config
from daemon.common.daemon_limits import QueryTooLongError
from daemon.common.domain_errors import (
    ConversationUnavailableError,
    IndexUnavailableError,
    NoSuchMemoryError,
    NotStoredError,
    SecretRefusedError,
    UnknownAgentError,
)
from daemon.common.guard import SecretGuard
from daemon.common.settings import DEFAULT_KEEP
from daemon.common.tokens import ADMIN
from daemon.front.cli import main
from daemon.front.status import offline_status
from layers.conversation.lifecycle.backup import BackupNotFoundError
from layers.conversation.policy.rules import ForbiddenError, PolicyError
from layers.daily.workspace_repo import RepoBusyError
from layers.local.models.vectors import VectorsUnavailableError
from layers.local.text.query import EmptyQueryError
from protocol.operations import Search

REPO = Path(__file__).resolve().parents[3]
CLIENT = REPO / "skills" / "mem0-integration" / "mem0_client.py"

# What only the service needs: the loop, the broker, the API server and the heavy libraries.
SERVICE_SIDE = (
    "daemon.service.memory_daemon",
    "daemon.conversation.broker",
    "daemon.api.app",
    "numpy",
    "apsw",
    "mem0",
    "qdrant_client",
    "qdrant_edge",
    "git",
    "llama_cpp",
    "prometheus_client",  # /metrics is the daemon's (~60-120 ms, ~12 MB to import standalone)
)
WEB_SERVER = ("uvicorn", "starlette", "fastapi")
# What the commands an agent calls many times a session (search, status, add) do not need: creating a
# workspace, git, writing tokens or the skill, the documents' TypedDicts, the full configuration (its
# models and YAML: a front call reads the validated-configuration cache).  Each cost a few ms of CPU a call
# (bench/bench_front.py), imported by the commands that need them.
FRONT_DEFERRED = (
    "layers.daily.workspace_repo",
    "layers.daily.git",
    "daemon.common.skill",
    "daemon.common.guard",
    "daemon.common.contracts",
    "tempfile",
    "pydantic",
    "yaml",
)


def _loaded_by(module: str) -> set[str]:
    """Top-level and daemon modules a fresh interpreter holds after ``import module``."""
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    return set(out.split())


def _forbidden(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if m in names or m.split(".")[0] in names)


@pytest.mark.parametrize("module", ["daemon.front.cli", "daemon.front.status"])
def test_the_cli_and_status_import_nothing_of_the_service(module):
    """``memstrata --help`` / ``status`` / ``search`` pay for the client and the config, not for the service."""
    loaded = _loaded_by(module)
    assert _forbidden(loaded, SERVICE_SIDE + WEB_SERVER) == []
    assert "httpx" not in loaded, "the client talks over the socket with the standard library"
    assert "pydantic" not in loaded, "the configuration's models load when a command reads it, not at import"
    assert sorted(m for m in loaded if m in FRONT_DEFERRED) == []


def _imported_by(args: list[str], config: Path) -> set[str]:
    """Every module a ``memstrata`` call imports (``-X importtime``), after one call that filled the caches."""
    cmd = [sys.executable, "-X", "importtime", "-m", "daemon", "--config", str(config), *args]
    subprocess.run(cmd, capture_output=True, cwd=REPO, check=True)  # the configuration cache, as an agent's first call
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
    return {line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}


def test_search_and_status_through_the_daemon_import_only_what_they_use(service_root, daemons):
    """An agent calls these many times a session: through a running daemon they import the client and the
    operation they send, not the service, the workspace and git helpers, nor the configuration's models."""
    daemons(service_root)
    for args in (["status"], ["search", "port", "--agent", "main", "--mode", "fts"]):
        loaded = _imported_by(args, service_root)
        assert "protocol.client" in loaded, args  # the call went through the daemon
        assert _forbidden(loaded, SERVICE_SIDE + WEB_SERVER + FRONT_DEFERRED) == [], args
        assert [m for m in loaded if m.startswith("layers.daily.")] == [], args


def test_the_service_imports_no_client_library_the_embedded_store_does_not_need():
    """The idle daemon on the embedded store (the default) holds no HTTP client (~5 MB, a remote
    server's probe), no mem0 and no qdrant-client (~88 MB, built at the first write or search)."""
    loaded = _loaded_by("daemon.service.memory_daemon")
    assert _forbidden(loaded, ("httpx", "mem0", "qdrant_client")) == []


def test_the_mcp_server_imports_nothing_of_the_service():
    """The MCP server is the standard library's (daemon/front/mcp_protocol.py): no service side, no web server."""
    loaded = _loaded_by("daemon.front.mcp_server")
    assert _forbidden(loaded, SERVICE_SIDE + WEB_SERVER) == []


def test_cli_commands_are_registered_explicitly():
    """cli.py registers every command module's commands; no command module imports cli.py back."""
    for path in sorted((REPO / "daemon").glob("cli_*.py")):
        assert not re.search(r"^from daemon\.cli import|^from daemon import cli\b", path.read_text(), re.M), path.name
    names = set(main.commands)
    for expected in ("search", "reindex", "model", "add", "mcp", "get", "list", "update", "delete"):
        assert expected in names
    for expected in ("cleanup", "backup", "restore-backup", "install", "uninstall", "init", "status", "run"):
        assert expected in names


# ---------------------------------------------------------------- shared texts and defaults


def test_demo_config_spells_out_the_defaults(tmp_path):
    """``memstrata init``'s file differs from the built-in defaults only in its paths (all under the root)."""
    config = parse_config(demo_config_text(tmp_path), tmp_path / "memstrata.yaml")
    assert config.file.model_dump(exclude={"paths"}) == ConfigFile().model_dump(exclude={"paths"})
    for name in ("root", "workspace", "agents_dir", "state_dir", "socket", "registry", "audit_dir"):
        assert getattr(config.paths, name).is_relative_to(tmp_path), name


def test_shipped_backup_jobs_keep_the_default_number_of_backups():
    """The timer's unit and the cron line say --keep; it is the CLI's and the API's default."""
    for path in (REPO / "systemd" / "memstrata-backup.service", REPO / "cron.d" / "mem0-cleanup"):
        kept = re.findall(r"backup --keep (\d+)", path.read_text())
        assert kept and {int(k) for k in kept} == {DEFAULT_KEEP}, path
    backup = main.commands["backup"]
    assert next(p for p in backup.params if p.name == "keep").default == DEFAULT_KEEP


def test_text_cites_only_what_the_repository_holds():
    """No comment or doc points outside the checkout (FACTS.md, ../shared); every docs/ file cited exists."""
    skip = {".git", ".venv", ".cache", "__pycache__", ".demo"}
    files = [REPO / "Makefile"] + [
        p
        for p in REPO.rglob("*")
        if p.is_file()
        and p.suffix in {".py", ".md", ".toml", ".service", ".timer", ".yaml"}
        and not skip & set(p.relative_to(REPO).parts)
    ]
    outside, missing = [], []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path != Path(__file__) and re.search(r"FACTS\.md|\.\./shared|ARCHITECTURE\.md", text):
            outside.append(str(path.relative_to(REPO)))
        rel = path.relative_to(REPO)
        # test data, and the recall sets' workspaces: an agent's memory cites the agent's own docs/
        data = rel.parts[0] == "tests" or (rel.parts[0] == "bench" and "workspace" in rel.parts)
        cited = [] if data else re.findall(r"\bdocs/[\w.-]+\.md", text)
        missing += [f"{path.relative_to(REPO)}: {d}" for d in cited if not (REPO / d).is_file()]
    assert outside == [] and missing == []


# ---------------------------------------------------------------- typed contracts


def test_the_skill_reads_only_keys_the_contracts_define():
    """mem0_client.py (stdlib only) lists the keys it reads; each one exists in daemon/common/contracts.py."""
    spec = importlib.util.spec_from_file_location("mem0_client_reads", CLIENT)
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    assert set(client.READS) <= {name for name in dir(contracts) if not name.startswith("_")}
    for contract, keys in client.READS.items():
        missing = set(keys) - contracts.keys_of(getattr(contracts, contract))
        assert not missing, f"{contract}: {sorted(missing)}"


def _undeclared(document: dict, contract: type, where: str = "") -> list[str]:
    """Keys of ``document`` that ``contract`` does not declare, nested contracts included."""
    hints = contract.__annotations__
    out = [f"{where}{key}" for key in document if key not in hints]
    nested = {
        "daemon": contracts.DaemonInfo,
        "watcher": contracts.WatcherInfo,
        "conversation": contracts.ConversationStatus,
        "index": contracts.IndexReport,
    }
    for key, value in document.items():
        if key in nested and key in hints and isinstance(value, dict):
            out += _undeclared(value, nested[key], f"{where}{key}.")
        if key == "agents" and contract is contracts.StatusDocument:
            for agent in value:
                out += _undeclared(agent, contracts.AgentReport, "agents[].")
    return out


def test_the_offline_status_document_has_only_contract_keys(tmp_path):
    """``memstrata status`` with the daemon down builds the document itself: in the contract's shape."""
    result = CliRunner().invoke(main, ["init", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    document = offline_status(load_config(tmp_path / "memstrata.yaml"), "no daemon socket")
    assert _undeclared(document, contracts.StatusDocument) == []
    assert document["agents"] and document["daemon"]["running"] is False


# ---------------------------------------------------------------- API errors


class _Daemon:
    """The API's view of the daemon (daemon.api.app.DaemonApi) whose search raises what a test gives it."""

    broker = None
    guard = SecretGuard([])
    courtesy = Courtesy()

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.trackers = {"a": object()}

    def status(self) -> dict:
        return {"daemon": {"running": True}}

    def identify(self, token: str | None) -> str | None:
        return ADMIN if token == "admin-token" else None

    def search(self, o: Search) -> dict:
        raise self.exc

    def reindex(self, agent_id: str | None, rebuild: bool = False) -> dict:
        raise self.exc

    def call_in_loop(self, fn, timeout: float = 0) -> object:
        return fn()


def _search_with(exc: BaseException):
    client = TestClient(build_app(_Daemon(exc)), raise_server_exceptions=False)
    return client.post("/v1/search", json={"agent": "a", "q": "x"}, headers={"Authorization": "Bearer admin-token"})


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (NotStoredError("disk full"), 507),
        (SecretRefusedError("never_store: api_key"), 422),
        (QueryTooLongError("too long"), 413),
        (ForbiddenError("not yours"), 403),
        (ConversationUnavailableError("store down"), 503),
        (IndexUnavailableError("the index of a is refused"), 503),
        (RepoBusyError("index.lock is held"), 503),
        (UnknownAgentError("unknown agent 'b'"), 404),
        (NoSuchMemoryError("no memory 0d9c…"), 404),
        (BackupNotFoundError("no backup at /srv/b.tar.gz"), 404),
        (EmptyQueryError("empty"), 400),
        (PolicyError("unknown memory type"), 400),
        (VectorsUnavailableError("model missing"), 409),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_domain_errors_map_to_their_status(exc, status):
    response = _search_with(exc)
    assert response.status_code == status and str(exc.args[0]) in response.json()["error"]


def test_a_bare_value_error_is_a_500_with_a_log_line(caplog):
    """A bare ValueError from a bug is not "bad request": the caller's request was fine."""
    with caplog.at_level(logging.ERROR, logger="daemon.api"):
        response = _search_with(ValueError("invalid literal for int()"))
    assert response.status_code == 500
    assert response.json()["error"].startswith(INTERNAL_ERROR) and "ValueError" in response.json()["error"]
    assert "invalid literal" not in response.text, "a bug's message may carry anything: it goes to the log"
    assert [r for r in caplog.records if "answered 500" in r.getMessage()]


@pytest.mark.parametrize(
    "exc",
    [KeyError("b"), IndexError("list index out of range"), LookupError("b"), FileNotFoundError(2, "No such file")],
    ids=lambda exc: type(exc).__name__,
)
def test_a_lookup_or_a_missing_file_in_code_is_a_500_with_a_log_line(exc, caplog):
    """Only the domain's "not found" (NotFoundError, BackupNotFoundError) is a 404: a KeyError from a bug
    answered "not found" would make the caller give up on a request that was fine."""
    with caplog.at_level(logging.ERROR, logger="daemon.api"):
        response = _search_with(exc)
    assert response.status_code == 500, response.text
    assert response.json()["error"] == f"{INTERNAL_ERROR} ({type(exc).__name__})"
    logged = [r for r in caplog.records if "answered 500" in r.getMessage()]
    assert logged and logged[0].getMessage() == f"POST /v1/search failed with {type(exc).__name__} (answered 500)"
    assert logged[0].exc_info and logged[0].exc_info[1] is exc, "the log line carries the traceback"


def test_any_other_unexpected_exception_is_a_500():
    assert _search_with(TypeError("unhashable type")).status_code == 500


def test_an_index_that_cannot_answer_is_a_503():
    """An index the daemon cannot use now (refused, being rebuilt, a full disk) is a 503 with its message."""
    response = _search_with(IndexUnavailableError("the index of a is damaged and being rebuilt; retry shortly"))
    assert response.status_code == 503 and "being rebuilt" in response.json()["error"]


def test_a_bare_runtime_error_from_search_is_a_500():
    assert _search_with(RuntimeError("bug")).status_code == 500


def test_a_bare_runtime_error_elsewhere_is_a_500():
    client = TestClient(build_app(_Daemon(RuntimeError("bug"))), raise_server_exceptions=False)
    response = client.post("/v1/reindex", json={"agent": "a"}, headers={"Authorization": "Bearer admin-token"})
    assert response.status_code == 500 and response.json()["error"].startswith(INTERNAL_ERROR)


def test_clients_say_a_500_plainly():
    """The MCP server says the daemon failed (not that it refused); the CLI and the skill show the message."""
    from daemon.front.daemon_client import DaemonRequestError
    from daemon.front.mcp_server import _daemon_error

    said = str(_daemon_error(DaemonRequestError(500, f"{INTERNAL_ERROR} (ValueError)")))
    assert said.startswith("the memstrata daemon failed on this request (HTTP 500)") and INTERNAL_ERROR in said
    assert "refused" not in said.split(":")[0]
