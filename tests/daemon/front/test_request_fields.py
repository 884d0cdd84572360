"""The L4 add, update and search and the L3 search fields: one definition, each other spelling checked against it.

The schemas of daemon/api/requests.py define the fields; the CLI's commands, the
client, the broker and the MCP tools take them again for their callers.  Each is
compared with the schema (names, kinds, required-ness, defaults, choices, bounds:
tests/request_fields.py), with every difference named and explained here; then
what each one sends is recorded on the daemon's socket and parsed with the
route's schema: every value arrives, under the name the daemon reads.
The skill's stdlib copy is checked the same way in tests/skills/test_mem0_client.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from daemon.api.requests import AddRequest, MemorySearchRequest, SearchRequest, UpdateRequest
from daemon.conversation.broker import Broker
from daemon.conversation.reads import Reads
from daemon.conversation.writes import Writes
from daemon.front.cli import main
from daemon.front.client import DaemonClient
from daemon.front.mcp_server import build_server
from daemon.shared.config import Config, load_config
from daemon.shared.tokens import TOKEN_ENV
from protocol import operations as op
from protocol.fields import describe
from tests.request_fields import (
    SAMPLES,
    Field,
    Recorder,
    click_fields,
    differences,
    mcp_fields,
    parsed,
    schema_fields,
    signature_fields,
)

ADD = schema_fields(AddRequest)
UPDATE = schema_fields(UpdateRequest)
L4_SEARCH = schema_fields(MemorySearchRequest)
L3_SEARCH = schema_fields(SearchRequest)

QUERY = {"query": "q"}  # a caller's "query" is the API's q
AS_JSON = {"json": "how the answer is shown"}
IN_THE_PATH = {"memory_id": "names the memory in the route's path (PUT /v1/memories/{memory_id})"}
ROLE = {"role": "the speaker of a mem0 conversation's turn: only the skill's mem0 Memory.add sends it"}
SHOW_EXPIRED = {"show_expired": "mem0 2.2's search option, sent by the skill's Memory.search (cleanup deletes them)"}
FIXED_AGENT = {"agent": "fixed when the MCP server starts: no tool takes an agent id"}
L3_ONLY = {
    name: "an L3 filter or option of the same command"
    for name in ("mode", "layer", "path", "since", "until", "explain", "json", "min_score")
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Iterator[tuple[Config, Recorder]]:
    """A root ``memstrata init`` made, and the recorder listening on its daemon socket."""
    path = tmp_path_factory.mktemp("fields")
    result = CliRunner().invoke(main, ["init", "--root", str(path)])
    assert result.exit_code == 0, result.output
    config = load_config(path / "memstrata.yaml")
    with Recorder(config.paths.socket).serving() as recorder:
        yield config, recorder


# ---------------------------------------------------------------- the places, field by field


def test_the_schemas_are_what_the_api_documents():
    """The comparison's reference itself: the defaults and bounds the routes apply (README.md, "Limits")."""
    assert L3_SEARCH["limit"] == Field("number", default=10, low=1, high=200)
    assert L4_SEARCH["limit"] == Field("number", default=10, low=1, high=100)
    assert L4_SEARCH["fallback"] == Field("flag", default=True)
    assert L3_SEARCH["mode"] == Field("text", default="auto", choices=("auto", "fts", "vector", "hybrid"))
    assert ADD["agent"].required and ADD["text"].required and not ADD["type"].required
    assert ADD["infer"] == Field("flag"), "left to the daemon: on when it has an LLM"


def test_the_cli_commands_take_the_schemas_fields():
    commands = main.commands
    assert differences(click_fields(commands["add"]), ADD, left_out=ROLE, own=AS_JSON) == []
    assert differences(click_fields(commands["update"]), UPDATE, own={**IN_THE_PATH, **AS_JSON}) == []
    local = differences(
        click_fields(commands["search"]),
        L3_SEARCH,
        renamed=QUERY,
        left_out={"layer": "--layer (below)"},
        own={
            "layer": "local (no filter), core or daily, or conversation and all: the L4 search",
            "filters": "the L4 search's mem0 filters (--layer conversation/all)",
            "show_superseded": "the L4 search's option (--layer conversation/all)",
            "trust_min": "the L4 search's option (--layer conversation/all)",
            **AS_JSON,
        },
    )
    assert local == []
    assert click_fields(commands["search"])["layer"].choices == ("local", "conversation", "all", "core", "daily")
    shared = differences(
        click_fields(commands["search"]),
        L4_SEARCH,
        renamed=QUERY,
        left_out={"fallback": "--layer all falls back to L3, --layer conversation does not", **SHOW_EXPIRED},
        own={k: why for k, why in L3_ONLY.items() if k != "explain"},  # --explain serves both layers
    )
    assert shared == ["limit: high 200, the schema's is 100"], "one --limit for every layer: L4 answers its first 100"


OPERATION_NAMES = {"query": "q", "memory_type": "type"}  # the operations' names of the API's fields


def test_the_operations_take_the_schemas_fields():
    """The clients build the protocol's operations (a misspelled field fails in the caller, the daemon would
    ignore it): their fields, defaults and choices are the schemas' until the schemas are derived from them."""
    pairs = ((op.Add, ADD, {}), (op.Update, UPDATE, IN_THE_PATH), (op.Search, L3_SEARCH, {}))
    for operation, schema, own in (*pairs, (op.MemorySearch, L4_SEARCH, {})):
        fields = signature_fields(operation)
        assert differences(fields, schema, renamed=OPERATION_NAMES, own=own, says_choices=False) == [], operation
        for item in describe(operation):
            if item.wire in schema:
                assert item.choices == schema[item.wire].choices, (operation, item.name)


def test_the_broker_takes_the_schemas_fields():
    """An update and an L4 search as the broker takes them (an add is the operation itself: ``Writes.add(Add)``)."""
    for update in (Writes.update, Broker.update):  # as the agent, whoever's token: no administrator's flag
        assert differences(signature_fields(update), UPDATE, own=IN_THE_PATH, says_choices=False) == []
    for search in (Broker.search, Reads.search):
        assert differences(signature_fields(search), L4_SEARCH, renamed=QUERY, says_choices=False) == [], search


def test_the_mcp_tools_take_the_schemas_fields(root):
    config, _ = root
    tools = build_server(config, "main").tools
    not_offered = {
        **FIXED_AGENT,
        **ROLE,
        "infer": "left to the daemon (on when it has an LLM)",
        "write_id": "a retrying client's idempotency key: the server sends each tool call once",
    }
    assert differences(mcp_fields(tools["memory_add"]), ADD, left_out=not_offered) == []
    assert differences(mcp_fields(tools["memory_update"]), UPDATE, left_out=FIXED_AGENT, own=IN_THE_PATH) == []
    left_out = {**FIXED_AGENT, **SHOW_EXPIRED}
    assert differences(mcp_fields(tools["memory_search"]), L4_SEARCH, renamed=QUERY, left_out=left_out) == []


def test_a_difference_is_found():
    """The comparison can fail: each kind of difference a place could drift into is named."""
    place = {
        "agent": Field("text"),  # not required
        "q": Field("number", required=True),
        "limit": Field("number", default=20, low=0, high=100),
        "mode": Field("text", choices=("auto", "fts")),
        "colour": Field("text"),
    }
    assert differences(place, L3_SEARCH) == [
        "colour: taken, but no field of the schema",
        "explain: a field of the schema not taken",
        "layer: a field of the schema not taken",
        "max_tokens: a field of the schema not taken",
        "min_score: a field of the schema not taken",
        "path: a field of the schema not taken",
        "since: a field of the schema not taken",
        "threshold: a field of the schema not taken",
        "until: a field of the schema not taken",
        "agent: optional, not in the schema",
        "limit: default 20, the schema's is 10",
        "limit: low 0, the schema's is 1",
        "limit: high 100, the schema's is 200",
        "mode: choices ('auto', 'fts'), the schema's are ('auto', 'fts', 'vector', 'hybrid')",
        "q: number, the schema's is text",
    ]


# ---------------------------------------------------------------- what each place sends


def _cli(config: Config, command: str, *args: str) -> None:
    result = CliRunner().invoke(main, ["--config", str(config.source), command, *args])
    assert result.exit_code == 0, result.output


def _argv(command: str, renamed: dict[str, str], skip: set[str]) -> tuple[list[str], dict[str, object]]:
    """The command's every argument and option with a sample value, and the fields they should send."""
    arguments, options, fields = [], [], {}
    for param in main.commands[command].params:
        name = param.name if param.param_type_name == "argument" else max(param.opts, key=len)[2:].replace("-", "_")
        if name in skip:
            continue
        wire = renamed.get(name, name)
        value = fields[wire] = SAMPLES[wire]
        if param.param_type_name == "argument":
            arguments.append(str(value))
        elif param.is_flag and param.secondary_opts:
            options.append(param.opts[0] if value else param.secondary_opts[0])
        elif param.is_flag:
            options += [param.opts[0]] if value else []
        else:
            options += [max(param.opts, key=len), json.dumps(value) if isinstance(value, dict) else str(value)]
    return [*arguments, *options], fields


def test_what_the_cli_sends_is_the_schemas_fields(root):
    config, recorder = root
    argv, fields = _argv("add", {}, {"json"})
    sent = recorder.one(lambda: _cli(config, "add", *argv, "--json"))
    assert (sent.method, sent.path) == ("POST", "/v1/memories")
    assert parsed(AddRequest, sent) == fields and set(fields) == set(ADD) - set(ROLE)
    argv, fields = _argv("update", {}, {"json", "memory_id"})
    sent = recorder.one(lambda: _cli(config, "update", SAMPLES["memory_id"], *argv, "--json"))
    assert (sent.method, sent.path) == ("PUT", f"/v1/memories/{SAMPLES['memory_id']}")
    assert parsed(UpdateRequest, sent) == fields == {k: SAMPLES[k] for k in UPDATE}
    argv, fields = _argv("search", QUERY, {"json", "filters", "show_superseded", "trust_min"})
    sent = recorder.one(lambda: _cli(config, "search", *argv, "--json"))
    assert (sent.method, sent.path) == ("POST", "/v1/search")
    assert parsed(SearchRequest, sent) == fields and set(fields) == set(L3_SEARCH)
    query = SAMPLES["q"]
    for layer, fallback in (("conversation", False), ("all", True)):
        argv = [query, "--agent", "main", "--layer", layer, "--limit", "7"]
        sent = recorder.one(lambda argv=argv: _cli(config, "search", *argv))
        assert (sent.method, sent.path) == ("POST", "/v1/memories/search")
        assert parsed(MemorySearchRequest, sent) == {"agent": "main", "q": query, "limit": 7, "fallback": fallback}
    argv = [query, "--agent", "main", "--layer", "conversation", "--filters", json.dumps(SAMPLES["filters"])]
    sent = recorder.one(lambda: _cli(config, "search", *argv))
    assert parsed(MemorySearchRequest, sent)["filters"] == SAMPLES["filters"]


def _keywords(method, renamed: dict[str, str] | None = None) -> dict[str, object]:
    """Every parameter of ``method`` with a sample value (the API's name looked up through ``renamed``)."""
    renamed = renamed or {}
    return {name: SAMPLES[renamed.get(name, name)] for name in signature_fields(method)}


def test_what_the_client_sends_is_the_schemas_fields(root):
    config, recorder = root
    client = DaemonClient(config.paths.socket)
    for name, operation, schema, model, route in (
        ("add", op.Add, ADD, AddRequest, "/v1/memories"),
        ("search", op.Search, L3_SEARCH, SearchRequest, "/v1/search"),
        ("memory_search", op.MemorySearch, L4_SEARCH, MemorySearchRequest, "/v1/memories/search"),
    ):
        keywords = _keywords(operation, OPERATION_NAMES)
        sent = recorder.one(lambda name=name, keywords=keywords: getattr(client, name)(**keywords))
        assert sent.path == route
        assert parsed(model, sent) == {k: SAMPLES[k] for k in schema}, name
    sent = recorder.one(lambda: client.add("main", SAMPLES["text"], type="fact"))  # the API's name, as before
    assert parsed(AddRequest, sent) == {"agent": "main", "text": SAMPLES["text"], "type": "fact"}
    sent = recorder.one(lambda: client.update(**_keywords(op.Update)))
    assert parsed(UpdateRequest, sent) == {k: SAMPLES[k] for k in UPDATE}


def test_what_the_mcp_tools_send_is_the_schemas_fields(root, monkeypatch):
    config, recorder = root
    monkeypatch.setenv(TOKEN_ENV, "the agent's own token")  # what the server sends with; the recorder takes any
    tools = build_server(config, "main").tools
    for tool, model in (
        ("memory_add", AddRequest),
        ("memory_update", UpdateRequest),
        ("memory_search", MemorySearchRequest),
    ):
        params = mcp_fields(tools[tool])
        arguments = {name: SAMPLES[QUERY.get(name, name)] for name in params}
        sent = recorder.one(lambda tool=tool, arguments=arguments: tools[tool].fn(**tools[tool].arguments(arguments)))
        expected = {QUERY.get(name, name): value for name, value in arguments.items() if name != "memory_id"}
        assert parsed(model, sent) == {**expected, "agent": "main"}, tool
