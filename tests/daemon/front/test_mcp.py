"""``memstrata mcp`` end to end: a real daemon, real MCP stdio servers, the official SDK client.

Each MCP server runs as its own subprocess and authenticates with its agent's
token (``$MEMSTRATA_TOKEN``), as an MCP client configured per agent would: with
the administrator's token it could read for anyone, and the isolation test
below would prove nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import REPO_ROOT, init_root, run_cli
from tests.mcp_session import Cluster, call, fail, make_cluster, memory_texts, remember, server, with_mcp

pytestmark = pytest.mark.slow

TOOLS = {
    "memory_search",
    "memory_add",
    "memory_get_all",
    "memory_get",
    "memory_update",
    "memory_delete",
    "memory_history",
    "memory_status",
    "memory_core",
}
READ_ONLY = {"memory_search", "memory_get_all", "memory_get", "memory_history", "memory_status", "memory_core"}


def _add_public_as_main(cluster: Cluster, text: str) -> None:
    """A public memory written by main through the CLI (the administrator's token)."""
    answer = json.loads(
        run_cli("add", text, "--agent", "main", "--visibility", "public", "--json", config=cluster.config).stdout
    )
    assert answer["visibility"] == "public", answer
    if answer["queued"]:
        cluster.store_settled()


# ---------------------------------------------------------------- the tools


def test_every_tool_answers_for_the_agent_the_server_was_started_for(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons)
    (cluster.workspace("a") / "IDENTITY.md").write_text("# IDENTITY\n\nI am agent a, keeper of the zebra ledger.\n")
    fact = "the staging database moved to port 6543"

    async def scenario(client: Client) -> None:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == TOOLS
        # No tool lets the caller name an agent: the command line fixed it.
        assert not any("agent" in (t.input_schema.get("properties") or {}) for t in tools)

        added = await remember(client, cluster, text=fact, type="decision")
        assert added["visibility"] == "private" and added["memory_type"] == "decision"

        assert fact in await memory_texts(client, "memory_search", query="which port does the staging database use")
        assert fact in await memory_texts(client, "memory_get_all")

        bundle = await call(client, "memory_core")
        assert "keeper of the zebra ledger" in bundle and "agent a" in bundle

        status = await call(client, "memory_status")
        assert set(status) == {"conversation", "agent", "permissions"}
        assert status["permissions"] == {"projects": [], "can_write_public": False, "may_write": ["private"]}
        assert status["conversation"]["reachable"] is True
        assert status["agent"]["id"] == "a"
        assert "b-workspace" not in json.dumps(status)  # nothing of the other agents

    with_mcp(server(cluster, "a", cluster.token("a")), scenario)


def test_private_memory_of_one_agent_never_reaches_another(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons)
    public = "the team standup is at nine thirty every weekday"
    private = "agent a keeps its scratch notes in the purple notebook"
    _add_public_as_main(cluster, public)

    async def write_as_a(client: Client) -> None:
        added = await remember(client, cluster, text=private, visibility="private")
        assert added["visibility"] == "private"
        # The author reads it back: the store does hold it, so b's blindness below means something.
        assert private in await memory_texts(client, "memory_search", query="purple notebook scratch notes")

    async def read_as_b(client: Client) -> None:
        found = await memory_texts(client, "memory_search", query="purple notebook scratch notes", limit=100)
        assert not any("purple notebook" in text for text in found)
        assert public in await memory_texts(client, "memory_search", query="when is the team standup")

        listed = await memory_texts(client, "memory_get_all", limit=1000)
        assert public in listed
        assert not any("purple notebook" in text for text in listed)

    with_mcp(server(cluster, "a", cluster.token("a")), write_as_a)
    with_mcp(server(cluster, "b", cluster.token("b")), read_as_b)


def test_correct_and_remove_a_memory_and_other_agents_cannot(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons)
    wrong = "the backup job runs at three in the morning"
    right = "the backup job runs at four in the morning"
    ids: dict[str, str] = {}

    async def as_a(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name, tool in tools.items():
            hints = tool.annotations
            assert hints is not None and hints.read_only_hint is (name in READ_ONLY), name
            assert "\n" not in tool.description and "  " not in tool.description, name
            assert tool.input_schema.get("additionalProperties") is False, name
        assert tools["memory_delete"].annotations.destructive_hint is True
        assert tools["memory_update"].annotations.idempotent_hint is True
        assert "session (7 days)" in tools["memory_add"].description

        added = await remember(client, cluster, text=wrong, visibility="private")
        memory_id = ids["a"] = (await call(client, "memory_get_all"))["results"][0]["id"]
        assert added["visibility"] == "private"
        assert (await call(client, "memory_get", memory_id=memory_id))["memory"] == wrong
        updated = await call(client, "memory_update", memory_id=memory_id, text=right)
        assert updated["memory"] == right and updated["event"] == "UPDATE"
        history = (await call(client, "memory_history", memory_id=memory_id))["results"]
        assert [(e["event"], e["new_memory"]) for e in history] == [("ADD", wrong), ("UPDATE", right)]

        message = await fail(client, "memory_search", query="backup", agent_id="b")
        assert "agent_id" in message and "acts for agent 'a'" in message
        message = await fail(client, "memory_get_all", limit=5, user="b")
        assert "unknown argument(s) user" in message
        message = await fail(client, "memory_add", text="an old fact", expires="2020-01-01")
        assert "in the past" in message and "400" in message
        message = await fail(client, "memory_update", memory_id=memory_id, text=right, expires="2020-01-01")
        assert "in the past" in message

    async def as_b(client: Client) -> None:
        memory_id = ids["a"]
        for tool, arguments in (
            ("memory_get", {}),
            ("memory_history", {}),
            ("memory_update", {"text": "b was here"}),
            ("memory_delete", {}),
        ):
            message = await fail(client, tool, memory_id=memory_id, **arguments)
            assert "404" in message and right not in message, tool

    async def a_deletes(client: Client) -> None:
        memory_id = ids["a"]
        assert (await call(client, "memory_delete", memory_id=memory_id)) == {"deleted": memory_id}
        assert "404" in await fail(client, "memory_get", memory_id=memory_id)
        history = (await call(client, "memory_history", memory_id=memory_id))["results"]
        assert [e["event"] for e in history] == ["ADD", "UPDATE", "DELETE"]

    with_mcp(server(cluster, "a", cluster.token("a")), as_a)
    with_mcp(server(cluster, "b", cluster.token("b")), as_b)
    with_mcp(server(cluster, "a", cluster.token("a")), a_deletes)


# ---------------------------------------------------------------- errors


def test_daemon_refusals_come_back_as_tool_errors(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons)

    async def as_a(client: Client) -> None:
        # Agents may not write public memories unless the registry allows it.
        message = await fail(client, "memory_add", text="every agent should read this", visibility="public")
        assert "403" in message and "Traceback" not in message

    async def b_with_the_token_of_a(client: Client) -> None:
        message = await fail(client, "memory_get_all")
        assert "belongs to agent 'a'" in message and "Traceback" not in message

    with_mcp(server(cluster, "a", cluster.token("a")), as_a)
    with_mcp(server(cluster, "b", cluster.token("a")), b_with_the_token_of_a)


def test_without_a_daemon_l4_tools_fail_clearly_and_core_still_works(tmp_path):
    cluster = make_cluster(tmp_path)
    (cluster.workspace("b") / "SOUL.md").write_text("# SOUL\n\nCalm, precise, fond of lighthouses.\n")

    async def scenario(client: Client) -> None:
        message = await fail(client, "memory_search", query="anything")  # no daemon, and no index to fall back on
        assert "no daemon socket" in message and "memstrata run" in message and "Traceback" not in message
        assert "no local index for b" in message
        message = await fail(client, "memory_get_all")
        assert "no daemon socket" in message and "memstrata run" in message
        assert "fond of lighthouses" in await call(client, "memory_core")

    with_mcp(server(cluster, "b", cluster.token("b")), scenario)


def test_unknown_agent_is_said_where_the_mcp_client_shows_it(tmp_path):
    """It used to exit 1 at start with the reason on stderr only, which an MCP client rarely shows."""
    cluster = make_cluster(tmp_path)
    params = server(cluster, "a", cluster.token("a"))
    params.args[params.args.index("a")] = "nobody"

    async def scenario(client: Client) -> None:
        assert "unknown agent 'nobody'" in (client.instructions or ""), client.instructions
        assert [tool.name for tool in (await client.list_tools()).tools] == ["memory_status"]
        message = await fail(client, "memory_status")
        assert "unknown agent 'nobody'" in message and "known agents: main, a, b" in message, message
        assert "Traceback" not in message

    with_mcp(params, scenario)
    proc = run_cli("mcp", "--agent", "nobody", config=cluster.config, check=False, input="")  # EOF: ends at once
    assert proc.returncode == 2  # a usage error, as every command's (daemon/front/failures.py)
    assert "unknown agent 'nobody'" in proc.stderr and "Traceback" not in proc.stderr


def test_memory_search_answers_from_the_local_index_while_the_daemon_is_down(tmp_path):
    """As the CLI's ``search --layer all`` does (and the seed's fallback promises): the agent's own L3
    index, marked degraded with the reason; another agent's files are not in it."""
    cluster = make_cluster(tmp_path)  # no daemon
    (cluster.workspace("a") / "memory").mkdir(exist_ok=True)
    note = "# 2026-11-30\n\n- the zebra ledger moved to vault 7\n"
    (cluster.workspace("a") / "memory" / "2026-11-30.md").write_text(note)
    (cluster.workspace("b") / "memory").mkdir(exist_ok=True)
    (cluster.workspace("b") / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n\n- b's zebra ledger is private\n")
    run_cli("reindex", config=cluster.config)  # offline: the indexes the daemon would keep

    async def scenario(client: Client) -> None:
        answer = await call(client, "memory_search", query="zebra ledger")
        assert answer["degraded"] is True and answer["layer"] == "local", answer
        assert "daemon is not running" in answer["reason"]
        texts = [r["memory"] for r in answer["results"]]
        assert any("vault 7" in t for t in texts) and not any("private" in t for t in texts), texts
        assert {r["path"] for r in answer["results"]} == {"memory/2026-11-30.md"}
        # a threshold holds there too: no query vector offline, so only full matches stay
        partial = await call(client, "memory_search", query="zebra ledger elsewhere", threshold=0.5)
        assert partial["degraded"] is True and partial["results"] == [], partial
        strict = await fail(client, "memory_search", query="zebra ledger", fallback=False)
        assert "memstrata daemon" in strict and "Traceback" not in strict
        assert "memstrata daemon" in await fail(client, "memory_add", text="a new fact")

    with_mcp(server(cluster, "a", cluster.token("a")), scenario)


# ---------------------------------------------------------------- the protocol itself, raw JSON lines


def _raw_session(tmp_path: Path, *messages: Any) -> list[dict]:
    """Send ``messages`` (a str is sent as is) as lines to ``memstrata mcp --agent main`` with no
    daemon, close stdin (the server ends), and return every line it wrote to stdout, parsed."""
    config = init_root(tmp_path, vectors={"backend": "off"})
    lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
    proc = run_cli("mcp", "--agent", "main", config=config, input="\n".join(lines) + "\n")
    return [json.loads(line) for line in proc.stdout.splitlines()]  # stdout is protocol only


def _request(request_id: Any, method: str, params: Any = None) -> dict:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    return message if params is None else {**message, "params": params}


def _initialize(request_id: int, version: str) -> dict:
    return _request(
        request_id,
        "initialize",
        {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    )


def test_raw_handshake_ping_notifications_and_json_rpc_errors(tmp_path):
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    answers = _raw_session(
        tmp_path,
        "this is not json {",
        _initialize(1, "2025-06-18"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        _request(2, "ping"),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        _request(3, "resources/list"),
        _request(4, "server/discover"),
        _initialize(5, "1999-01-01"),
        _request(6, "tools/list", ["not", "an", "object"]),
        "[1, 2]",
    )
    # One answer per request, none for the two notifications, in order.
    assert [a.get("id") for a in answers] == [None, 1, 2, 3, 4, 5, 6, None], answers
    assert all(a["jsonrpc"] == "2.0" for a in answers)
    assert answers[0]["error"]["code"] == -32700
    hello = answers[1]["result"]
    assert hello["protocolVersion"] == "2025-06-18"  # the client's, when supported
    assert hello["serverInfo"]["name"] == "memstrata" and "tools" in hello["capabilities"]
    assert "long-term memory" in hello["instructions"]
    assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert answers[3]["error"]["code"] == -32601 and "resources/list" in answers[3]["error"]["message"]
    assert answers[4]["error"]["code"] == -32601  # the stateless era: a client falls back to initialize
    assert answers[5]["result"]["protocolVersion"] == LATEST_HANDSHAKE_VERSION  # else the newest
    assert LATEST_HANDSHAKE_VERSION in HANDSHAKE_PROTOCOL_VERSIONS
    assert answers[6]["error"]["code"] == -32602
    assert answers[7]["error"]["code"] == -32600  # a batch: not in the protocol since 2025-06-18


def test_raw_tool_calls_with_bad_arguments_are_tool_errors_and_unknown_tools_protocol_errors(tmp_path):
    def call(request_id: int, name: str, arguments: Any) -> dict:
        return _request(request_id, "tools/call", {"name": name, "arguments": arguments})

    answers = _raw_session(
        tmp_path,
        _initialize(1, "2025-11-25"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call(2, "memory_search", {"query": 5}),
        call(3, "memory_get_all", {"limit": 0}),
        call(4, "memory_add", {"text": "a fact", "type": "rumour"}),
        call(5, "memory_core", {"budget": True}),
        call(6, "memory_get", {}),
        call(7, "memory_teleport", {}),
        call(8, "memory_core", ["not", "an", "object"]),
        call(9, "memory_core", {"include_reference": False}),
    )
    assert [a["id"] for a in answers] == list(range(1, 10)), answers
    errors = {a["id"]: a["result"]["content"][0]["text"] for a in answers[1:6]}
    assert all(a["result"]["isError"] is True for a in answers[1:6])
    assert "query: expected string" in errors[2]
    assert "limit: must be ≥ 1" in errors[3]
    assert "'rumour' is not one of" in errors[4] and "decision" in errors[4]
    assert "budget: expected integer" in errors[5]  # true is not a number in JSON
    assert "memory_id: required" in errors[6]
    assert "Traceback" not in json.dumps(answers)
    assert answers[6]["error"]["code"] == -32602 and "memory_teleport" in answers[6]["error"]["message"]
    assert answers[7]["error"]["code"] == -32602
    core = answers[8]["result"]
    assert core["isError"] is False and "memstrata core bundle" in core["structuredContent"]["result"]
    assert core["content"] == [{"type": "text", "text": core["structuredContent"]["result"]}]


def test_the_mcp_server_imports_no_sdk_and_no_validation_library():
    """What made ``memstrata mcp`` slow to answer ``initialize``: the MCP SDK's server side (~1.5 s CPU of
    pydantic protocol models, starlette and uvicorn); the registry's pydantic + PyYAML load on use."""
    code = "import sys, daemon.front.mcp_server; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    loaded = {name.split(".")[0] for name in out.stdout.split()}
    assert not loaded & {"mcp", "mcp_types", "pydantic", "starlette", "uvicorn", "anyio", "yaml"}, loaded


def test_batches_are_answered_under_2025_03_26_only(tmp_path):
    """2025-03-26 requires a server to accept JSON-RPC batches (and forbids initialize in one); the
    revisions after it removed them, and before initialize no revision is agreed."""
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    answers = _raw_session(
        tmp_path,
        [_request(1, "ping")],  # before initialize
        _initialize(2, "2025-03-26"),
        notification,
        [
            _request(3, "ping"),
            _request(4, "tools/list"),
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
            _request(5, "tools/call", {"name": "memory_core"}),
            _request(6, "tools/call", {"name": "memory_core", "arguments": []}),
            _request(7, "resources/list"),
            42,
            _initialize(8, "2025-03-26"),
        ],
        [notification],  # notifications only: nothing to answer
        [],
        _initialize(9, "2025-06-18"),
        [_request(10, "ping")],
    )
    arrays = [a for a in answers if isinstance(a, list)]
    singles = {a["id"]: a for a in answers if isinstance(a, dict) and a["id"] is not None}
    refusals = [a["error"] for a in answers if isinstance(a, dict) and a["id"] is None]
    assert len(answers) == len(arrays) + len(singles) + len(refusals) and len(arrays) == 1, answers

    batch = {a["id"]: a for a in arrays[0]}
    assert len(arrays[0]) == 7 and set(batch) == {3, 4, 5, 6, 7, None, 8}, arrays[0]
    assert batch[3]["result"] == {} and len(batch[4]["result"]["tools"]) == 9
    assert "memstrata core bundle" in batch[5]["result"]["structuredContent"]["result"]
    assert batch[6]["error"]["code"] == -32602  # arguments that is not an object, in a batch too
    assert batch[7]["error"]["code"] == -32601
    assert batch[None]["error"]["code"] == -32600  # 42 is no request
    assert batch[8]["error"]["code"] == -32600 and "initialize" in batch[8]["error"]["message"]

    assert singles[2]["result"]["protocolVersion"] == "2025-03-26"
    assert singles[9]["result"]["protocolVersion"] == "2025-06-18"
    assert set(singles) == {2, 9}
    assert [r["code"] for r in refusals] == [-32600, -32600, -32600]
    before, empty, after = (r["message"] for r in refusals)
    assert "batches" in before and "2025-03-26" in before
    assert "empty batch" in empty
    assert "batches" in after and "2025-06-18" in after


def test_answers_of_calls_running_at_once_never_interleave(tmp_path):
    """Many calls at once, each answer several KB (the core bundle with its reference files), pings
    between them: every line written is one whole message, every request answered exactly once."""
    from daemon.front.mcp_stdio import MAX_CALLS_RUNNING

    calls = [
        _request(n, "tools/call", {"name": "memory_core", "arguments": {"include_reference": True}})
        if n % 3
        else _request(n, "ping")
        for n in range(2, 80)
    ]
    answers = _raw_session(tmp_path, _initialize(1, "2025-11-25"), *calls)  # each line parsed as JSON
    assert sorted(a["id"] for a in answers) == list(range(1, 80)), answers
    cores = [a["result"] for a in answers if a["id"] > 1 and a["id"] % 3]
    whole = [c for c in cores if not c["isError"]]
    assert all("memstrata core bundle" in c["structuredContent"]["result"] for c in whole)
    assert all(f"{MAX_CALLS_RUNNING} calls of this session" in c["content"][0]["text"] for c in cores if c["isError"])
    assert len(whole) >= MAX_CALLS_RUNNING
    assert len(json.dumps(whole[0])) > 4096  # longer than a pipe writes at once (PIPE_BUF)
