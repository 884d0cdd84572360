"""One round trip per operation over every edge: the client, the CLI, the MCP tools and the skill.

Each edge's options are generated from the operation's fields (protocol/operations.py), so nothing
here compares their spellings; what is checked is what arrives.  For every operation an edge offers,
the edge is driven with a sample value for each field it takes (found from the edge's own parameters,
so a field added to an operation and offered by an edge is covered without a word here), the request
is recorded on the daemon's socket (tests/request_fields.py ``Recorder``) and parsed with the route's
schema; it must be what the protocol's client sends for the same operation, and every field the edge
does not take must be listed below with the reason.  The client's methods named after an operation
are driven the same way, and the schemas the routes derive are held to the defaults and bounds the README
documents.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable, Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from daemon.api import requests as api
from daemon.common.config import Config, load_config
from daemon.common.settings import DEFAULT_KEEP
from daemon.common.tokens import TOKEN_ENV
from daemon.front.cli import main
from daemon.front.daemon_client import DaemonClient
from daemon.front.mcp_server import FIELD_NAMES, build_server
from protocol import operations as op
from protocol.fields import describe
from tests.helpers import REPO_ROOT
from tests.request_fields import SAMPLES, Field, Recorder, Sent, parsed, schema_fields


def _skill() -> Any:
    """skills/mem0-integration/mem0_client.py imported by path (its folder is no package)."""
    spec = importlib.util.spec_from_file_location("mem0_client_edges", SKILL_CLIENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SKILL_CLIENT = REPO_ROOT / "skills" / "mem0-integration" / "mem0_client.py"
mem0_client = _skill()

# A sample of every field of the operations below, by the field's name.
VALUES: dict[str, object] = {
    **{f.name: SAMPLES[f.wire] for o in (op.Add, op.Search, op.MemorySearch) for f in describe(o) if f.wire in SAMPLES},
    "memory_id": SAMPLES["memory_id"],
    "cursor": "c-1",
    "show_archived": True,
    "dry_run": True,
    "keep": 3,
}

# The route's schema of each operation.
SCHEMAS: dict[type[op.Operation], type] = {
    op.Add: api.AddRequest,
    op.Update: api.UpdateRequest,
    op.Search: api.SearchRequest,
    op.MemorySearch: api.MemorySearchRequest,
    op.List: api.ListParams,
    op.Get: api.GetParams,
    op.Delete: api.DeleteParams,
    op.History: api.HistoryParams,
    op.RestoreMemory: api.RestoreMemoryParams,
    op.DeleteAll: api.DeleteAllParams,
    op.Backup: api.BackupRequest,
    op.Restore: api.RestoreRequest,
}

# What an edge does not take, and why (an edge's agent is the caller's: --agent, the MCP server's, the skill's).
ROLE = {"role": "the speaker of a mem0 conversation's turn: only the skill's mem0 Memory.add sends it"}
NOT_TAKEN: dict[str, dict[type[op.Operation], dict[str, str]]] = {
    "cli": {
        op.Add: ROLE,
    },
    "mcp": {
        op.Add: {
            **ROLE,
            "infer": "left to the daemon (on when it has an LLM)",
            "write_id": "a retrying client's idempotency key: the server sends each tool call once",
        },
        op.MemorySearch: {"show_expired": "mem0 2.2's search option, for the skill's Memory.search"},
    },
    "skill": {
        op.Add: ROLE,
        op.List: {
            "cursor": "get_all follows the cursors itself",
            **{
                name: "get_all lists what is valid now" for name in ("show_superseded", "show_expired", "show_archived")
            },
        },
    },
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Iterator[tuple[Config, Recorder]]:
    """A root ``memstrata init`` made, and the recorder listening on its daemon socket."""
    path = tmp_path_factory.mktemp("edges")
    result = CliRunner().invoke(main, ["init", "--root", str(path)])
    assert result.exit_code == 0, result.output
    config = load_config(path / "memstrata.yaml")
    with Recorder(config.paths.socket).serving() as recorder:
        yield config, recorder


def _caller(operation: type[op.Operation]) -> dict[str, str]:
    """The agent an operation is sent as (``main``); an administrator's operation names none."""
    return {"agent": "main"} if any(f.name == "agent" for f in describe(operation)) else {}


def _taken(operation: type[op.Operation], names: set[str], edge: str) -> dict[str, object]:
    """The sample of each field ``names`` holds; the fields left out must be the edge's listed ones."""
    fields = [f.name for f in describe(operation) if f.name != "agent"]
    assert set(fields) - names == set(NOT_TAKEN[edge].get(operation, {})), (edge, operation.__name__)
    return {name: VALUES[name] for name in fields if name in names}


def _arrives_as_sent_by_the_client(
    recorder: Recorder, config: Config, operation: type[op.Operation], taken: dict[str, object], sent: Sent
) -> None:
    """``sent`` parses with the route's schema to what the protocol's client sends for ``taken``."""
    expected = recorder.one(lambda: DaemonClient(config.paths.socket).call(operation(**_caller(operation), **taken)))
    assert (sent.method, sent.path) == (expected.method, expected.path), operation.__name__
    schema = SCHEMAS[operation]
    assert parsed(schema, sent) == parsed(schema, expected), operation.__name__


def test_the_client_sends_every_field(root):
    """The protocol's client itself: every field of every operation arrives, under the name the route reads."""
    config, recorder = root
    for operation, schema in SCHEMAS.items():
        given = {f.name: VALUES[f.name] for f in describe(operation) if f.name != "agent"}
        given = {**_caller(operation), **given}
        sent = recorder.one(
            lambda operation=operation, given=given: DaemonClient(config.paths.socket).call(operation(**given))
        )
        wire = {f.name: f.wire for f in describe(operation)}
        path_fields = {f.name for f in describe(operation) if f.where == "path"}
        assert parsed(schema, sent) == {wire[k]: v for k, v in given.items() if k not in path_fields}, (
            operation.__name__
        )
        if path_fields:
            assert SAMPLES["memory_id"] in sent.path


def test_the_schemas_are_what_the_api_documents():
    """The schemas the routes derive from the operations say the defaults and bounds of README.md ("Limits")."""
    l3, l4, add = (schema_fields(model) for model in (api.SearchRequest, api.MemorySearchRequest, api.AddRequest))
    assert l3["limit"] == Field("number", default=10, low=1, high=200)
    assert l4["limit"] == Field("number", default=10, low=1, high=100)
    assert l4["fallback"] == Field("flag", default=True)
    assert l3["mode"] == Field("text", default="auto", choices=("auto", "fts", "vector", "hybrid"))
    assert add["agent"].required and add["text"].required and not add["type"].required
    assert add["infer"] == Field("flag"), "left to the daemon: on when it has an LLM"


# The client's methods named after an operation (protocol/client.py, daemon/front/daemon_client.py).
CLIENT: dict[type[op.Operation], str] = {
    op.Add: "add",
    op.Update: "update",
    op.Search: "search",
    op.MemorySearch: "memory_search",
}


@pytest.mark.parametrize("operation", list(CLIENT), ids=lambda o: o.__name__)
def test_the_clients_methods_send_what_the_operation_sends(root, operation):
    """Every field given to the client's method by the operation's name arrives as the operation sends it."""
    config, recorder = root
    taken = {f.name: VALUES[f.name] for f in describe(operation) if f.name != "agent"}
    method = getattr(DaemonClient(config.paths.socket), CLIENT[operation])
    _arrives_as_sent_by_the_client(recorder, config, operation, taken, recorder.one(lambda: method("main", **taken)))


def test_the_clients_add_takes_the_apis_name_of_the_type(root):
    config, recorder = root
    sent = recorder.one(lambda: DaemonClient(config.paths.socket).add("main", SAMPLES["text"], type="fact"))
    _arrives_as_sent_by_the_client(recorder, config, op.Add, {"text": SAMPLES["text"], "memory_type": "fact"}, sent)


# ---------------------------------------------------------------- the CLI

# The CLI command of each operation, and what it is told besides the fields.
CLI: dict[type[op.Operation], tuple[str, ...]] = {
    op.Add: ("add",),
    op.Update: ("update",),
    op.Search: ("search", "--layer", "core"),  # --layer core: the L3 search's layer core
    op.MemorySearch: ("search", "--layer", "conversation"),
    op.List: ("list",),
    op.Get: ("get",),
    op.Delete: ("delete",),
    op.DeleteAll: ("delete", "--all"),
    op.RestoreMemory: ("restore-memory",),
}
CLI_NAMES = {"path_glob": "path"}  # a command's parameter → the field


def _cli_argv(command: click.Command, operation: type[op.Operation]) -> tuple[list[str], set[str]]:
    """A sample for every argument and option of ``command`` that is a field of ``operation``."""
    fields = {f.name for f in describe(operation)}
    arguments: list[str] = []
    options: list[str] = []
    taken: set[str] = set()
    for param in command.params:
        name = CLI_NAMES.get(param.name or "", param.name or "")
        if name not in fields or name == "agent" or name == "layer":
            continue
        taken.add(name)
        value = VALUES[name]
        if isinstance(param, click.Argument):
            arguments.append(str(value))
        elif isinstance(param, click.Option) and param.is_flag and param.secondary_opts:
            options.append(param.opts[0] if value else param.secondary_opts[0])
        elif isinstance(param, click.Option) and param.is_flag:
            options += [param.opts[0]] if value else []
        else:
            options += [param.opts[0], json.dumps(value) if isinstance(value, dict) else str(value)]
    return [*arguments, *options], taken


@pytest.mark.parametrize("operation", list(CLI), ids=lambda o: o.__name__)
def test_the_cli_sends_what_the_client_sends(root, operation):
    config, recorder = root
    command, *told = CLI[operation]
    argv, names = _cli_argv(main.commands[command], operation)
    if operation is op.Search:
        names.add("layer")  # --layer core
    if operation is op.MemorySearch:
        names.add("fallback")  # --layer conversation: no fallback (--layer all: the L3 one)
    taken = _taken(operation, names, "cli")
    if operation is op.Search:
        taken["layer"] = "core"
    if operation is op.MemorySearch:
        taken["fallback"] = False
    if operation is op.List:
        taken["filters"] = {"AND": [taken["filters"]]}  # the CLI joins --filters with --type/--visibility/--project

    def run() -> None:
        result = CliRunner().invoke(
            main, ["--config", str(config.source), command, *told, *argv, "--agent", "main", "--json"]
        )
        assert result.exit_code == 0, result.output

    _arrives_as_sent_by_the_client(recorder, config, operation, taken, recorder.one(run))


def test_the_cli_backs_up_and_restores_as_the_client_does(root, tmp_path):
    """``backup`` and ``restore-backup`` (the administrator's) send the Backup and Restore operations."""
    config, recorder = root
    archive = tmp_path / "memstrata-backup.tar.gz"
    archive.write_bytes(b"")  # the CLI takes an existing file (the daemon reads it)
    for argv, operation, taken in (
        (["backup", "--keep", "3"], op.Backup, {"keep": 3}),
        (["backup"], op.Backup, {"keep": DEFAULT_KEEP}),
        (["restore-backup", str(archive)], op.Restore, {"path": str(archive)}),
    ):

        def run(argv: list[str] = argv) -> None:
            result = CliRunner().invoke(main, ["--config", str(config.source), *argv, "--json"])
            assert result.exit_code == 0, result.output

        _arrives_as_sent_by_the_client(recorder, config, operation, taken, recorder.one(run))


def test_the_cli_reads_history_of_a_memory(root):
    config, recorder = root
    argv = ["--config", str(config.source), "history", "--memory", SAMPLES["memory_id"], "--agent", "main", "--json"]
    sent = recorder.one(lambda: CliRunner().invoke(main, argv))
    _arrives_as_sent_by_the_client(recorder, config, op.History, {"memory_id": SAMPLES["memory_id"]}, sent)


# ---------------------------------------------------------------- the MCP tools

MCP: dict[type[op.Operation], str] = {
    op.Add: "memory_add",
    op.Update: "memory_update",
    op.MemorySearch: "memory_search",
    op.List: "memory_get_all",
    op.Get: "memory_get",
    op.Delete: "memory_delete",
    op.History: "memory_history",
}


@pytest.mark.parametrize("operation", list(MCP), ids=lambda o: o.__name__)
def test_the_mcp_tools_send_what_the_client_sends(root, monkeypatch, operation):
    config, recorder = root
    monkeypatch.setenv(TOKEN_ENV, "the agent's own token")  # what the server sends with; the recorder takes any
    tool = build_server(config, "main").tools[MCP[operation]]
    names = {FIELD_NAMES.get(p.name, p.name): p.name for p in tool.params}
    taken = _taken(operation, set(names), "mcp")
    arguments = {names[field]: value for field, value in taken.items()}
    sent = recorder.one(lambda: tool.fn(**tool.arguments(arguments)))
    _arrives_as_sent_by_the_client(recorder, config, operation, taken, sent)


# ---------------------------------------------------------------- the skill (its command line)

SKILL: dict[type[op.Operation], str] = {
    op.Add: "add",
    op.MemorySearch: "search",
    op.List: "get_all",
    op.Get: "get",
    op.Delete: "delete",
}


def _skill_argv(parser: argparse.ArgumentParser, operation: type[op.Operation]) -> tuple[list[str], set[str]]:
    fields = {f.name for f in describe(operation)}
    arguments: list[str] = []
    options: list[str] = []
    taken: set[str] = set()
    for action in parser._actions:
        if action.dest not in fields or action.dest == "agent" or action.help == argparse.SUPPRESS:
            continue
        value = VALUES[action.dest]
        if not action.option_strings:
            arguments.append(str(value))
        elif isinstance(action, argparse._StoreConstAction):
            if action.const is not value:
                continue  # --infer / --no-infer: the one that says the sample
            options.append(action.option_strings[0])
        elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if action.const is value:
                options.append(action.option_strings[0])
            elif action.default is not value:
                continue
        else:
            options += [action.option_strings[0], json.dumps(value) if isinstance(value, dict) else str(value)]
        taken.add(action.dest)
    return [*arguments, *options], taken


@pytest.mark.parametrize("operation", list(SKILL), ids=lambda o: o.__name__)
def test_the_skills_commands_send_what_the_client_sends(root, monkeypatch, operation):
    config, recorder = root
    monkeypatch.setenv(mem0_client.TOKEN_ENV, "a token")
    parser = mem0_client.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    argv, names = _skill_argv(commands.choices[SKILL[operation]], operation)
    taken = _taken(operation, names, "skill")
    common = ["--socket", str(config.paths.socket), "--agent", "main", "--json"]
    run: Callable[[], Any] = lambda: mem0_client.main([*common, SKILL[operation], *argv])  # noqa: E731
    sent = recorder.one(lambda: (run() == 0) or pytest.fail(f"{SKILL[operation]} {argv} failed"))
    _arrives_as_sent_by_the_client(recorder, config, operation, taken, sent)
