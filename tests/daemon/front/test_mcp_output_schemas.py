"""Every MCP tool's answer is what its ``outputSchema`` says, key for key, over a real stdio session.

The schemas are generated from the answers' TypedDicts (protocol/answers.py, protocol/json_schema.py) and
left open to keys they do not name, so that a client holding results to them (the SDK's does) never fails a
call over a key the types lack; here each answer is held to the schema closed as well: a key the daemon
answers with and the types do not declare fails this test, not an agent's call.  Each tool is called as an
agent's MCP client calls it (the SDK's client, ``memstrata mcp`` as a subprocess, a real daemon), in the
variants whose answers carry other keys (a search with explain and a budget, a superseding write, a memory's
history with its chain, the L3 fallback while the daemon is down).
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import pytest
from jsonschema.validators import validator_for
from mcp import Client

from tests.helpers import run_cli
from tests.mcp_session import make_cluster, server, text_of, with_mcp

pytestmark = pytest.mark.slow


def closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to any other key."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in ("items", "anyOf", "additionalProperties") else v for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: closed(v) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    return out


def problems(schema: dict, answer: Any) -> list[str]:
    """Where ``answer`` breaks ``schema`` (a valid JSON Schema, checked first)."""
    validator_class = validator_for(schema)
    validator_class.check_schema(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator_class(schema).iter_errors(answer)]


class Answers:
    """The structured answers of a session's successful calls, and the tools' declared output schemas."""

    def __init__(self) -> None:
        self.schemas: dict[str, dict] = {}
        self.seen: list[tuple[str, dict]] = []

    async def listed(self, client: Client) -> None:
        for tool in (await client.list_tools()).tools:
            assert tool.output_schema is not None, tool.name
            self.schemas[tool.name] = tool.output_schema

    async def call(self, client: Client, tool: str, **arguments: Any) -> dict:
        result = await client.call_tool(tool, arguments)  # the SDK's client checks the declared schema itself
        assert not result.is_error, f"{tool} failed: {text_of(result)}"
        assert result.structured_content is not None, tool
        self.seen.append((tool, result.structured_content))
        return result.structured_content

    def check(self) -> None:
        wrong = []
        for tool, answer in self.seen:
            schema = self.schemas[tool]
            wrong += [f"{tool} (declared): {p}" for p in problems(schema, answer)]
            wrong += [f"{tool} (undeclared key): {p}" for p in problems(closed(schema), answer)]
        assert wrong == [], "\n".join(wrong)


def test_every_tool_answers_in_its_declared_output_schema(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons)
    answers = Answers()

    async def scenario(client: Client) -> None:
        await answers.listed(client)
        first = await answers.call(
            client,
            "memory_add",
            text="the staging database listens on port 6543",
            type="decision",
            user_id="alice",
            metadata={"ticket": "OPS-7"},
        )
        if first["queued"]:  # the store was briefly away (a busy machine loading the model): wait for the replay
            await anyio.to_thread.run_sync(cluster.store_settled)
        old_id = (await answers.call(client, "memory_get_all"))["results"][0]["id"]
        newer = await answers.call(
            client, "memory_add", text="the staging database listens on port 6544", supersedes=old_id
        )
        new_id = next(r["id"] for r in newer["results"] if r["id"] != old_id)
        await answers.call(client, "memory_add", text="the staging database listens on port 6544")  # a NOOP
        await answers.call(client, "memory_search", query="staging database port")
        await answers.call(
            client, "memory_search", query="staging database port", explain=True, show_superseded=True, max_tokens=50
        )
        await answers.call(client, "memory_get", memory_id=old_id)
        await answers.call(client, "memory_update", memory_id=new_id, text="the staging database listens on 6545")
        history = await answers.call(client, "memory_history", memory_id=old_id)
        assert len(history["chain"]) == 2, history  # the chain is in the answer being checked
        await answers.call(client, "memory_delete", memory_id=new_id)
        await answers.call(client, "memory_history", memory_id=new_id)  # a deleted memory's: no chain
        await answers.call(client, "memory_get_all", limit=1)
        await answers.call(client, "memory_status")
        await answers.call(client, "memory_core")

    with_mcp(server(cluster, "a", cluster.token("a")), scenario)
    assert {tool for tool, _ in answers.seen} == set(answers.schemas), "every tool was called"
    answers.check()


def test_the_local_fallback_answers_in_the_search_s_output_schema(tmp_path):
    cluster = make_cluster(tmp_path)  # no daemon: memory_search answers from the agent's own L3 index
    (cluster.workspace("a") / "memory").mkdir(exist_ok=True)
    (cluster.workspace("a") / "memory" / "2026-11-30.md").write_text(
        "# 2026-11-30\n\n- the zebra ledger is in vault 7\n"
    )
    run_cli("reindex", config=cluster.config)
    answers = Answers()

    async def scenario(client: Client) -> None:
        await answers.listed(client)
        found = await answers.call(client, "memory_search", query="zebra ledger")
        assert found["degraded"] is True and found["results"], found
        await answers.call(client, "memory_search", query="zebra ledger", max_tokens=5)

    with_mcp(server(cluster, "a", cluster.token("a")), scenario)
    answers.check()


def test_the_checker_finds_an_undeclared_key_and_a_wrong_type():
    """The closed form catches what the declared (open) schema lets through."""
    schema = {
        "type": "object",
        "properties": {"results": {"type": "array", "items": {"type": "object", "properties": {"id": {}}}}},
    }
    answer = {"results": [{"id": "1", "extra": True}]}
    assert problems(schema, answer) == []
    assert problems(closed(schema), answer) and "extra" in problems(closed(schema), answer)[0]
    assert problems(closed(copy.deepcopy(schema)), {"results": "no list"})
