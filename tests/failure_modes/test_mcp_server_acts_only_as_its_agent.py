"""``memstrata mcp --agent alpha`` run as root acted as the administrator.

Before: with no ``$MEMSTRATA_TOKEN`` (the README's ``claude mcp add`` line sets none, and
agent runtimes run as root), the MCP server presented the administrator's token, which
root can read from the state directory.  The model behind alpha then read, listed,
updated and deleted beta's private memory and saw its history (the daemon audited it as
alpha acting on beta's memory).  Now the server presents alpha's own token only: found
in alpha's workspace (``.memstrata/token``, as the skill finds it) or given in
``$MEMSTRATA_TOKEN``; never the administrator's.  Without alpha's token it still starts
and says why in its instructions and in the answer to every call.

Every test runs the server as root (the condition of the leak), through the official
MCP SDK client, against a real daemon.
"""

from __future__ import annotations

import json
import os

import pytest
from mcp import Client

from daemon.front.daemon_client import DaemonClient
from tests.helpers import run_cli
from tests.mcp_session import Cluster, add_as, call, fail, make_cluster, memory_texts, remember, server, with_mcp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the leak needs root: it reads the administrator's token"),
]

BETA_PRIVATE = "beta keeps the vault combination in the green folder"
ALPHA_OWN = "alpha prefers the night shift for database migrations"
L4_TOOLS = (
    "memory_search",
    "memory_add",
    "memory_get_all",
    "memory_get",
    "memory_update",
    "memory_delete",
    "memory_history",
)


def _beta_client(cluster: Cluster) -> DaemonClient:
    assert cluster.daemon is not None
    return DaemonClient(cluster.daemon.socket, timeout=60, token=cluster.token("beta"))


def _beta_memory(cluster: Cluster) -> str:
    """The id of beta's private memory, written with beta's own token."""
    add_as(cluster, "beta", BETA_PRIVATE, "private")
    with _beta_client(cluster) as beta:
        listed = beta.get_all("beta")["results"]
    return next(r["id"] for r in listed if r["memory"] == BETA_PRIVATE)


def _beta_memory_untouched(cluster: Cluster, memory_id: str) -> None:
    with _beta_client(cluster) as beta:
        assert beta.get("beta", memory_id)["memory"] == BETA_PRIVATE
        assert [e["event"] for e in beta.history("beta", memory_id)["results"]] == ["ADD"]


def test_alphas_server_as_root_cannot_touch_betas_private_memory(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons, agents=("alpha", "beta"))
    beta_id = _beta_memory(cluster)

    async def as_alpha(client: Client) -> None:
        # The server works, as alpha: its token came from alpha's workspace.
        await remember(client, cluster, text=ALPHA_OWN, visibility="private")
        mine = (await call(client, "memory_get_all"))["results"]
        assert [(r["memory"], r["agent_id"]) for r in mine if r["memory"] == ALPHA_OWN] == [(ALPHA_OWN, "alpha")]
        assert ALPHA_OWN in await memory_texts(client, "memory_search", query="night shift database migrations")

        found = await memory_texts(client, "memory_search", query="vault combination green folder", limit=100)
        assert not any("vault combination" in text for text in found), found
        listed = await memory_texts(client, "memory_get_all", limit=1000)
        assert ALPHA_OWN in listed and not any("vault combination" in text for text in listed), listed
        for tool, arguments in (
            ("memory_get", {}),
            ("memory_history", {}),
            ("memory_update", {"text": "alpha was here"}),
            ("memory_delete", {}),
        ):
            message = await fail(client, tool, memory_id=beta_id, **arguments)
            assert "404" in message and "vault combination" not in message, (tool, message)
        status = await call(client, "memory_status")
        assert status["agent"]["id"] == "alpha" and "beta-workspace" not in json.dumps(status)

    # As root, with no $MEMSTRATA_TOKEN, from a directory that is no workspace.
    with_mcp(server(cluster, "alpha", None, cwd=tmp_path), as_alpha)
    _beta_memory_untouched(cluster, beta_id)

    # The same with alpha's token given explicitly, as the MCP client's configuration may do.
    with_mcp(server(cluster, "alpha", cluster.token("alpha"), cwd=tmp_path), as_alpha)
    _beta_memory_untouched(cluster, beta_id)


def test_without_alphas_token_the_server_starts_and_every_answer_says_why(tmp_path, daemons):
    cluster = make_cluster(tmp_path, daemons, agents=("alpha", "beta"))
    beta_id = _beta_memory(cluster)
    (cluster.workspace("alpha") / ".memstrata" / "token").unlink()

    async def without_a_token(client: Client) -> None:
        why = client.instructions or ""
        assert "no token for agent 'alpha'" in why and ".memstrata/token" in why, why
        assert "administrator" in why and "memstrata agent token alpha" in why, why
        params = {t.name: set(t.input_schema.get("properties") or {}) for t in (await client.list_tools()).tools}
        arguments = {"query": "vault combination", "text": "alpha was here", "memory_id": beta_id}
        for tool in L4_TOOLS:
            message = await fail(client, tool, **{k: v for k, v in arguments.items() if k in params[tool]})
            assert "no token for agent 'alpha'" in message and "vault combination" not in message, (tool, message)
        status = await call(client, "memory_status")
        assert "no token for agent 'alpha'" in status["problem"] and status["agent"] is None, status
        assert "vault combination" not in json.dumps(status) and "beta-workspace" not in json.dumps(status)
        core = await call(client, "memory_core")  # L1 comes from alpha's own files: still served
        assert "memstrata core bundle" in core and "no token for agent 'alpha'" in core

    with_mcp(server(cluster, "alpha", None, cwd=tmp_path), without_a_token)
    _beta_memory_untouched(cluster, beta_id)

    # The administrator's token handed to the server is refused, not used.
    admin = cluster.daemon.admin_token() if cluster.daemon else None
    assert admin

    async def with_the_admin_token(client: Client) -> None:
        assert "administrator's token" in (client.instructions or ""), client.instructions
        message = await fail(client, "memory_get", memory_id=beta_id)
        assert "administrator's token" in message and "vault combination" not in message, message
        message = await fail(client, "memory_search", query="vault combination")
        assert "administrator's token" in message and "vault combination" not in message, message

    with_mcp(server(cluster, "alpha", admin, cwd=tmp_path), with_the_admin_token)
    _beta_memory_untouched(cluster, beta_id)

    # Once alpha has a token again, the server that is still running uses it (read at each call).
    async def token_issued_meanwhile(client: Client) -> None:
        assert "no token" in await fail(client, "memory_get_all")
        run_cli("agent", "token", "alpha", config=cluster.config)
        listed = await memory_texts(client, "memory_get_all", limit=1000)
        assert not any("vault combination" in text for text in listed), listed
        assert "404" in await fail(client, "memory_get", memory_id=beta_id)

    with_mcp(server(cluster, "alpha", None, cwd=tmp_path), token_issued_meanwhile)
    _beta_memory_untouched(cluster, beta_id)


@pytest.mark.parametrize("planted", [".memstrata/token", ".memstrata"])
def test_a_token_symlinked_to_another_agents_is_never_read(tmp_path, daemons, planted):
    """Alpha's workspace is alpha's to write: a symlink there to beta's token (or to beta's whole
    ``.memstrata``) would make alpha's server, run as root, act as beta. It is refused unread."""
    cluster = make_cluster(tmp_path, daemons, agents=("alpha", "beta"))
    beta_id = _beta_memory(cluster)
    mine, theirs = cluster.workspace("alpha") / planted, cluster.workspace("beta") / planted
    if planted == ".memstrata":
        (mine / "token").unlink()
        mine.rmdir()
    else:
        mine.unlink()
    mine.symlink_to(theirs)

    async def planted_link(client: Client) -> None:
        assert "refused" in (client.instructions or "") and "symlink" in (client.instructions or "")
        message = await fail(client, "memory_get", memory_id=beta_id)
        assert "no token for agent 'alpha'" in message and "vault combination" not in message, message
        listed = await fail(client, "memory_get_all")
        assert "vault combination" not in listed

    with_mcp(server(cluster, "alpha", None, cwd=tmp_path), planted_link)
    _beta_memory_untouched(cluster, beta_id)
