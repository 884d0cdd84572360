"""CLI for L4, the conversation memory: add, get, list, update, delete, search (``--layer``), mcp.

Every command goes through the daemon, which owns the store (the embedded
Qdrant storage is single-process) and applies the rules; the CLI only shows
what the daemon answers.  As the administrator (who can read the state
directory) the CLI may act as any agent, and then acts *as* it: ``--agent X`` reads and
changes exactly what X may (the daemon decides it: daemon/api/app.py ``authorize``), and the
audit log says ``admin as X``; otherwise it uses the agent's token.
``mcp`` never acts as the administrator: it serves one agent, with that agent's token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from daemon.common.domain_errors import UnknownAgentError
from daemon.common.terminal import escaped, for_terminal
from daemon.common.workspaces import get_agent
from daemon.front.failures import EXIT_USAGE
from daemon.front.options import (
    FieldsCommand,
    agent_option,
    config_of,
    conversation_failed,
    degraded_note,
    echo_json,
    field_options,
    json_option,
    lifecycle_note,
    placement,
    use_note,
)

if TYPE_CHECKING:
    from daemon.front.daemon_client import DaemonClient

# protocol.operations is imported by each command that sends one (with the client), not by `memstrata --help`.

# The options of the commands are the operations' fields (protocol/operations.py: help, choices, bounds);
# only the CLI's flag names (--type for memory_type) and metavars are said here.
_ids: dict[str, Any] = {"user_id": {"metavar": "U"}, "run_id": {"metavar": "R"}, "actor_id": {"metavar": "A"}}


@click.command("add", cls=FieldsCommand)
@click.argument("text")
@agent_option
@field_options(
    "Add",
    *("memory_type", "visibility", "project", "expires", "infer", "write_id", "user_id", "run_id", "actor_id"),
    *("metadata", "supersedes", "trust", "source"),
    memory_type={"flag": "--type"},
    project={"metavar": "P"},
    write_id={"metavar": "ID"},
    supersedes={"metavar": "MEMORY_ID"},
    **_ids,
)
@json_option
@click.pass_context
def add_cmd(ctx: click.Context, text: str, agent_id: str, as_json: bool, **fields: Any) -> None:
    """Remember TEXT in the conversation memory (L4) as agent ID.

    When the store is unreachable the write is queued durably and replayed,
    exactly once, when it is back: the answer then says "queued". A write
    with --supersedes is never queued (the store must see what it replaces).
    """
    from daemon.common.settings import client_timeout
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError, connect
    from protocol import operations as op

    config = config_of(ctx)
    get_agent(config, agent_id)
    try:
        with connect(config, agent_id, timeout=client_timeout(config)) as client:
            answer = client.call(op.Add(agent_id, text, **fields))
    except (DaemonRequestError, DaemonUnavailableError) as exc:
        raise conversation_failed(exc) from None
    if as_json:
        echo_json(answer)
        return
    answer = for_terminal(answer)
    where = placement(answer)
    guessed = " (inferred)" if answer.get("visibility_inferred") else ""
    expiry = f", expires after {answer['expiration_date']}" if answer.get("expiration_date") else ", never expires"
    if answer.get("queued"):
        click.echo(f"queued {answer['write_id']} [{where}{guessed}]{expiry}: {answer.get('reason')}")
    else:
        ids = ", ".join(r["id"] for r in answer.get("results", [])) or "nothing new (merged by the LLM)"
        replaced = f"; {answer['supersedes']} is superseded by it" if answer.get("superseded") else ""
        trusted = f", trust {answer['trust']}" if answer.get("trust") else ""
        click.echo(f"remembered {ids} [{where}{guessed}, {answer['memory_type']}{trusted}]{expiry}{replaced}")


@click.command("mcp")
@agent_option
@click.pass_context
def mcp_cmd(ctx: click.Context, agent_id: str) -> None:
    """Serve agent ID's memory to an MCP client (Model Context Protocol, over stdio).

    \b
    Tools: memory_search, memory_add, memory_get_all, memory_get, memory_update,
    memory_delete, memory_history, memory_status (L4, through the daemon) and
    memory_core (L1, read from the workspace). The agent is fixed
    here: the tools cannot reach another agent's memory.

    \b
    Register it in the MCP client as a stdio server, for example:
      {"mcpServers": {"memstrata": {
         "command": "memstrata",
         "args": ["--config", "/etc/memstrata/memstrata.yaml", "mcp", "--agent", "ID"]}}}
    (Claude Code: claude mcp add memstrata -- memstrata --config FILE mcp --agent ID)

    The server acts as agent ID only, with ID's own token: $MEMSTRATA_TOKEN
    when set, else ID's workspace .memstrata/token. It never uses the
    administrator's token, even as root (and refuses it in $MEMSTRATA_TOKEN).
    Without ID's token it starts, and says why in its instructions and in the
    answer to every call; so does an agent id with no workspace, so the MCP
    client shows it. stdout carries the protocol; logs go to stderr.
    """
    from daemon.front.mcp_server import build_refusing_server, build_server

    config = config_of(ctx)
    try:
        get_agent(config, agent_id)
    except (UnknownAgentError, ValueError) as exc:
        # said on stderr too, but served: an MCP client shows the server's answers, not its stderr
        click.echo(f"Error: {exc}", err=True)
        build_refusing_server(str(exc)).run("stdio")
        raise SystemExit(EXIT_USAGE) from None  # an unknown agent or an invalid id: daemon/front/failures.py
    build_server(config, agent_id).run("stdio")


# ------------------------------------------------------------ get, list, update, delete, history (L4)


def _ask(ctx: click.Context, agent_id: str, request: Callable[[DaemonClient], Any]) -> Any:
    """One request to the daemon as ``agent_id``; its refusals become one clear line and exit 1."""
    from daemon.common.settings import client_timeout
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError, connect

    config = config_of(ctx)
    get_agent(config, agent_id)
    try:
        with connect(config, agent_id, timeout=client_timeout(config)) as client:
            return request(client)
    except (DaemonRequestError, DaemonUnavailableError) as exc:
        raise conversation_failed(exc) from None


def print_memory_text(text: str) -> None:
    """A memory's text under its listing line: its own line breaks kept, each line indented, so no text
    can start a line that reads as another entry; every other control character escaped."""
    for line in escaped(text or "", keep_newlines=True).split("\n"):
        click.echo(f"   {line}")


def _say_degraded(answer: dict) -> None:
    """On stderr, as a search's notes: the answer came from this spoke's replica of the hub, and how old it is."""
    note = degraded_note(answer)
    if note:
        click.echo(escaped(f"({note})"), err=True)


def _print_memory(i: int, raw: dict) -> None:
    r = for_terminal(raw)
    where = placement(r)
    meta = f"{r.get('memory_type')}, by {r.get('agent_id')}, {(r.get('created_at') or '')[:10]}"
    meta += use_note(r)
    if r.get("updated_at") and r.get("updated_at") != r.get("created_at"):
        meta += f", updated {r['updated_at'][:10]}"
    if r.get("expiration_date"):
        meta += f", until {r['expiration_date']}"
    meta += lifecycle_note(r)
    click.echo(click.style(f"{i}. [{where}]", bold=True) + f" ({meta})  id {r['id']}")
    print_memory_text(raw.get("memory") or "")


# --type, --visibility and --project narrow a listing and a delete --all (DeleteAll's fields; a listing
# sends them as mem0 filters)
filter_options = field_options(
    "DeleteAll", "memory_type", "visibility", "project", memory_type={"flag": "--type"}, project={"metavar": "P"}
)


@click.command("get")
@click.argument("memory_id")
@agent_option
@json_option
@click.pass_context
def get_cmd(ctx, memory_id, agent_id, as_json) -> None:
    """Show one L4 memory by id, as agent ID (one it may read: public, its projects', its own).

    Also as root: --agent ID means "as ID", never "as administrator"; another agent's private
    memory is "no memory", as an unknown id is."""
    from protocol import operations as op

    answer = _ask(ctx, agent_id, lambda c: c.call(op.Get(agent_id, memory_id)))
    if as_json:
        echo_json(answer)
        return
    _say_degraded(answer)
    _print_memory(1, answer)


@click.command("list", cls=FieldsCommand)
@agent_option
@field_options("List", "limit", "cursor", cursor={"metavar": "C"})
@filter_options
@field_options("List", "filters", "show_superseded", "show_expired", "show_archived")
@json_option
@click.pass_context
def list_cmd(
    ctx: click.Context,
    agent_id: str,
    memory_type: str | None,
    visibility: str | None,
    project: str | None,
    filters: dict[str, Any] | None,
    as_json: bool,
    **fields: Any,
) -> None:
    """List the L4 memories agent ID may read, a page at a time (the API's GET /v1/memories)."""
    wanted = {"memory_type": memory_type, "visibility": visibility, "project_id": project}
    combined: dict[str, Any] = {k: v for k, v in wanted.items() if v is not None}
    if filters:
        combined["AND"] = [filters]
    from protocol import operations as op

    answer = _ask(ctx, agent_id, lambda c: c.call(op.List(agent_id, filters=combined or None, **fields)))
    if as_json:
        echo_json(answer)
        return
    _say_degraded(answer)
    if not answer["results"]:
        click.echo("no memories")
    for i, r in enumerate(answer["results"], start=1):
        _print_memory(i, r)
    if answer.get("next_cursor"):
        click.echo(escaped(f"(more: --cursor {answer['next_cursor']})"))


@click.command("update", cls=FieldsCommand)
@click.argument("memory_id")
@click.argument("text")
@agent_option
@field_options("Update", "expires")
@json_option
@click.pass_context
def update_cmd(ctx, memory_id, text, agent_id, expires, as_json) -> None:
    """Replace the text of one of agent ID's own L4 memories (it keeps its id, placement and created_at).

    While the store is down the update is refused (exit 1) and nothing changes: it is never queued.
    """
    # an empty --expires was never sent
    from protocol import operations as op

    answer = _ask(ctx, agent_id, lambda c: c.call(op.Update(agent_id, memory_id, text, expires=expires or None)))
    echo_json(answer) if as_json else click.echo(escaped(f"updated {answer['id']}: {answer['memory']}"))


@click.command("delete", cls=FieldsCommand)
@click.argument("memory_id", required=False)
@agent_option
@click.option("--all", "delete_all", is_flag=True, help="Every one of agent ID's own memories matching the filters.")
@filter_options
@field_options(
    "DeleteAll", "dry_run", "user_id", "run_id", "actor_id", when="With --all", dry_run={"flag": "--dry-run"}, **_ids
)
@json_option
@click.pass_context
def delete_cmd(
    ctx, memory_id, agent_id, delete_all, memory_type, visibility, project, dry_run, user_id, run_id, actor_id, as_json
) -> None:
    """Delete one of agent ID's own L4 memories by id, or with --all every own one matching the filters.

    Another agent's memories are never deleted (not even with --all, not even as root: --agent ID
    means "as ID"; the audit log records the operator as "admin as ID"). While the store is down
    the delete is refused (exit 1) and nothing changes.
    """
    from protocol import operations as op

    if bool(memory_id) == bool(delete_all):
        raise click.UsageError("give a MEMORY_ID or --all (with --type/--visibility/--project to narrow it)")
    if memory_id and (memory_type or visibility or project or dry_run or user_id or run_id or actor_id):
        raise click.UsageError(
            "--type, --visibility, --project, --user-id, --run-id, --actor-id and --dry-run go with --all"
        )
    if memory_id:
        answer = _ask(ctx, agent_id, lambda c: c.call(op.Delete(agent_id, memory_id)))
        echo_json(answer) if as_json else click.echo(escaped(f"deleted {answer['deleted']}"))
        return
    given = {"memory_type": memory_type, "visibility": visibility, "project": project, "dry_run": dry_run}
    given.update(user_id=user_id, run_id=run_id, actor_id=actor_id)
    narrowed = {k: v for k, v in given.items() if v not in (None, False)}  # unset ones are not sent
    answer = _ask(ctx, agent_id, lambda c: c.call(op.DeleteAll(agent_id, **narrowed)))
    if as_json:
        echo_json(answer)
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {len(answer['ids'])} memor{'y' if len(answer['ids']) == 1 else 'ies'} of {agent_id}")
    for memory_id in answer["ids"]:
        click.echo(escaped(f"  {memory_id}"))


@click.command("restore-memory")
@click.argument("memory_id")
@agent_option
@json_option
@click.pass_context
def restore_memory_cmd(ctx, memory_id, agent_id, as_json) -> None:
    """Bring one of agent ID's L4 memories back: out of the archive, or no longer superseded.

    The cleanup archives a memory whose importance faded (decay by use): it is hidden
    from searches but kept. Restored, it is found again and its age counts from now.
    A superseded memory restored is valid again beside the one that replaced it.
    While the store is down the restore is refused (exit 1) and nothing changes.
    """
    from protocol import operations as op

    answer = _ask(ctx, agent_id, lambda c: c.call(op.RestoreMemory(agent_id, memory_id)))
    if as_json:
        echo_json(answer)
    elif answer.get("restored"):
        click.echo(escaped(f"restored {answer['id']} (was {answer['previous_state']}): {answer['memory']}"))
    else:
        click.echo(escaped(f"{answer['id']} is valid already: nothing to restore"))


def print_memory_history(ctx: click.Context, agent_id: str, memory_id: str, as_json: bool) -> None:
    """``history --memory ID``: the ADD/UPDATE/DELETE events of one L4 memory agent ID may read (also once deleted)."""
    from protocol import operations as op

    answer = _ask(ctx, agent_id, lambda c: c.call(op.History(agent_id, memory_id)))
    if as_json:
        echo_json(answer)
        return
    answer = for_terminal(answer)  # texts and ids as the store holds them, each on its one line
    for event in answer["results"]:
        text = event.get("new_memory") if event["event"] != "DELETE" else event.get("old_memory")
        click.echo(f"{(event.get('updated_at') or event.get('created_at') or '')[:19]}  {event['event']:<6}  {text}")
    chain = answer.get("chain") or []
    if len(chain) > 1:
        click.echo("validity (what replaced what, oldest first):")
        for step in chain:
            until = f" until {step['invalid_at'][:19]}" if step.get("invalid_at") else " (valid now)"
            mark = " <- this memory" if step["id"] == memory_id else ""
            click.echo(f"  {step['id']}  from {(step.get('valid_from') or '')[:19]}{until}{mark}: {step['memory']}")
