"""CLI for L4 maintenance: cleanup (cron at 03:00 UTC), backup (02:15 UTC), consolidate (03:30 UTC), restore-backup.

With the embedded store these go through the running daemon, the only process
that may open it; with the daemon down they open it themselves, holding the
state lock so the daemon cannot start halfway.  A remote server is reached
directly.  Exit status: 0 done, 1 something failed (nothing is deleted that is
not in the audit log), 2 usage.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from daemon.common.settings import DEFAULT_KEEP
from daemon.common.terminal import for_terminal
from daemon.front.options import config_of, echo_json, json_option
from protocol.vocabulary import MEMORY_TYPES, VISIBILITIES  # the rules' own (layers/conversation/policy/rules.py)

if TYPE_CHECKING:
    from daemon.common.config import Config

# A backup or cleanup started with the daemon (a timer with Persistent=true at boot) finds it
# starting: the state locked, its socket not there yet.  It waits this long for one of the two.
DAEMON_START_WAIT_S = 60.0


class _DaemonStarting(Exception):
    """The state is locked by another process, which has no socket up (yet)."""


@contextlib.contextmanager
def _direct_store(config: Config, command: str, embed: bool = False) -> Iterator:
    """The store opened by this process; an embedder only when ``embed`` (a consolidation that may write summaries)."""
    from daemon.common.domain_errors import DaemonError
    from daemon.common.settings import acquire_state_lock, store_settings
    from layers.conversation.adapters.store import ConversationStore

    lock = None
    if config.conversation.backend == "embedded":
        try:
            lock = acquire_state_lock(config.paths.state_dir, f"memstrata {command}")
        except DaemonError as exc:
            raise _DaemonStarting(str(exc)) from None
    if embed:
        from daemon.ops.consolidation import l4_embedder

        embedder = l4_embedder(config)
        store = ConversationStore(store_settings(config), embedder, embedder.dimension())
    else:
        store = ConversationStore(store_settings(config), embedder=None, dim=0)  # type: ignore[arg-type]
    try:
        yield store
    finally:
        store.close()
        if config.fleet.listen and command != "backup":
            # the hub's store changed with no daemon to record it in the change feed: its spokes rebuild
            from daemon.conversation.feed import bump_epoch

            bump_epoch(config.paths.state_dir)
        if lock is not None:
            lock.close()


def _run(config: Config, command: str, via_daemon: Callable, directly: Callable, embed: bool = False) -> dict:
    """``via_daemon(client)`` when the embedded store is the daemon's; else ``directly(store)``.

    A daemon that is starting (state locked, no socket yet) is waited for, up to
    DAEMON_START_WAIT_S; the daemon itself waits for its store to open.
    """
    import time

    if config.conversation.backend == "hub":  # a spoke's timer fires too: it says so and succeeds
        click.echo(
            f"memstrata {command}: run it on the hub: the fleet's L4 is the hub's (conversation.backend: hub); "
            "nothing was done here",
            err=True,
        )
        sys.exit(0)
    deadline = time.monotonic() + DAEMON_START_WAIT_S
    while True:
        try:
            return _run_once(config, command, via_daemon, directly, embed)
        except _DaemonStarting as exc:
            if time.monotonic() >= deadline:
                raise click.ClickException(
                    f"{exc}; waited {DAEMON_START_WAIT_S:g} s for the daemon to start or the other command to end"
                ) from None
            time.sleep(0.25)


def _run_once(config: Config, command: str, via_daemon: Callable, directly: Callable, embed: bool = False) -> dict:
    from daemon.common.domain_errors import ConflictError, NotFoundError
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError, connect
    from layers.conversation.adapters.store import StoreConfigError, StoreUnavailableError

    if config.conversation.backend == "embedded":
        try:
            with connect(config, timeout=3600) as client:
                return via_daemon(client)
        except DaemonRequestError as exc:
            raise click.ClickException(str(exc)) from None
        except DaemonUnavailableError:
            pass  # the daemon is down: this process may open the store
    try:
        with _direct_store(config, command, embed) as store:
            return directly(store)
    except (StoreUnavailableError, StoreConfigError) as exc:
        raise click.ClickException(f"the conversation store is unreachable: {exc}") from None
    except (ValueError, FileNotFoundError, NotFoundError, ConflictError) as exc:
        raise click.ClickException(str(exc)) from None


@click.command("cleanup")
@click.option("--dry-run", "dry_run", is_flag=True, help="List what is expired (and audit it); delete nothing.")
@click.option("--execute", is_flag=True, help="Delete what is expired.")
@click.option(
    "--max-age-days",
    type=click.IntRange(min=0),
    metavar="N",
    help="Force: types that expire also go after N days, even if their date is later. Permanent types only "
    "with --include-permanent.",
)
@click.option("--include-permanent", is_flag=True, help="Let --max-age-days delete permanent types too.")
@click.option("--agent", "agent_id", metavar="ID", help="Only this agent's memories.")
@click.option("--visibility", type=click.Choice(VISIBILITIES), help="Only this visibility.")
@click.option("--project", metavar="P", help="Only this project's memories.")
@click.option("--type", "memory_type", type=click.Choice(MEMORY_TYPES), help="Only this memory type.")
@json_option
@click.pass_context
def cleanup_cmd(
    ctx, dry_run, execute, max_age_days, include_permanent, agent_id, visibility, project, memory_type, as_json
) -> None:
    """Delete expired conversation memories (mem0 only hides them), archive faded ones.

    A memory is expired when its expiration_date (UTC) has passed; one without
    a date, of a type with a retention (session 7 d, chat_summary 30 d, …),
    when created_at + retention has passed. Permanent types never expire by age.
    A memory whose importance (decay by use: age over the type's half-life,
    slowed by how often it was returned) is below conversation.decay.archive_below
    is archived: hidden from search, kept (memstrata restore-memory brings it back).
    --max-age-days never deletes a memory a valid one supersedes before its own expiry.
    Every deleted or archived (or, in a dry run, deletable or archivable) memory is
    written to memory-cleanup-YYYY-MM-DD.log in paths.audit_dir, without its text.
    Exactly one of --dry-run and --execute is required.
    """
    from daemon.ops.maintenance import cleanup
    from protocol.operations import Cleanup

    if dry_run == execute:
        raise click.UsageError("give exactly one of --dry-run (preview) and --execute (delete)")
    if include_permanent and max_age_days is None:
        raise click.UsageError("--include-permanent needs --max-age-days")
    config = config_of(ctx)
    o = Cleanup(
        execute,
        max_age_days,
        include_permanent,
        agent=agent_id,
        visibility=visibility,
        project=project,
        memory_type=memory_type,
    )
    result = _run(config, "cleanup", lambda client: client.call(o), lambda store: cleanup(config, store, o))
    if as_json:
        echo_json(result)
    else:
        _print_cleanup(result)
    sys.exit(1 if result["errors"] else 0)


def _print_cleanup(result: dict) -> None:
    result = for_terminal(result)  # errors may quote a store's answer: escaped on the terminal
    executed = result["mode"] == "execute"
    verb, archive_verb = ("deleted", "archived") if executed else ("would delete", "would archive")
    click.echo(
        f"{result['mode']}: scanned {result['scanned']}, expired {result['expired']}, {verb} "
        f"{result['deleted'] if executed else result['expired']}, {archive_verb} {result.get('archived', 0)} "
        f"(faded), kept {result.get('kept_in_chain', 0)} (a valid memory supersedes them)"
    )
    for title, table in (("type", result["by_type"]), ("visibility", result["by_visibility"])):
        for name, t in table.items():
            click.echo(
                f"  {title} {name:<13} scanned {t['scanned']:>6}  expired {t['expired']:>6}  deleted {t['deleted']:>6}"
                f"  archived {t.get('archived', 0):>6}"
            )
    for error in result["errors"]:
        click.echo(f"error: {error}", err=True)
    click.echo(f"audit: {result['audit_dir']}/memory-cleanup-<date>.log")


@click.command("consolidate")
@click.option("--dry-run", "dry_run", is_flag=True, help="Plan and write the report; change nothing.")
@click.option("--execute", is_flag=True, help="Plan, write the report, and apply it as one batch.")
@click.option("--undo", "undo_run", metavar="RUN", help="Put back exactly what run RUN changed.")
@click.option("--force", is_flag=True, help="With --undo: restore also memories changed since the run.")
@click.option("--list", "list_runs", is_flag=True, help="The newest runs and their state (from their reports).")
@click.option("--agent", "agent_id", metavar="ID", help="Only this agent's memories.")
@click.option(
    "--max-share",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=0.25,
    show_default=True,
    metavar="F",
    help="Refuse the run if it would invalidate more than this share of any agent's valid memories.",
)
@json_option
@click.pass_context
def consolidate_cmd(ctx, dry_run, execute, undo_run, force, list_runs, agent_id, max_share, as_json) -> None:
    """Fold duplicate L4 memories, flag conflicts, summarise task logs; undoably.

    Memories are compared only within one scope (the same agent, visibility, project, type,
    user_id and run_id): never across agents, never across visibility.  Exact and near
    duplicates (cosine >= 0.90 on the store's own vectors, and the same words: the same
    numbers, dates, weekdays, names and identifiers, none replaced, at most a note or a
    confirmation set apart, "记一下：…", "…, as before") fold into the one that has the most
    of them; the others are superseded (invalid_at, superseded_by), not deleted.  Near-identical
    statements that differ in a value (6333 / 6334, 周三 / 周四) are flagged as conflicts; with
    conversation.llm configured the LLM says which are outdated, and groups of task_log
    memories become one knowledge memory.  Without an LLM both are only reported.

    Each run writes a report to state_dir/consolidation/RUN.json (the plan, and the payloads
    before and after) before it changes anything; a run that would invalidate more than
    --max-share of an agent's memories is refused and applies nothing (exit 1).  --undo RUN
    restores every payload exactly; it refuses (exit 1) when a memory changed since the run,
    unless --force.  Exactly one of --dry-run, --execute, --undo and --list is required.
    """
    from daemon.ops.consolidation import ConsolidateOptions, recent
    from protocol.operations import Consolidate

    if sum(map(bool, (dry_run, execute, undo_run, list_runs))) != 1:
        raise click.UsageError("give exactly one of --dry-run, --execute, --undo RUN and --list")
    if force and not undo_run:
        raise click.UsageError("--force goes with --undo RUN")
    if undo_run and agent_id:
        raise click.UsageError("--undo RUN undoes the whole run: no --agent")
    config = config_of(ctx)
    if list_runs:
        runs = recent(config)
        if as_json:
            echo_json(runs)
        for run in runs if not as_json else []:
            click.echo(
                f"{run['run_id']}  {run.get('mode') or '?':<8} {run.get('state') or '?':<9} "
                f"valid {run.get('valid') or 0:>7,}  invalidated {run.get('invalidated') or 0:>6,}  "
                f"added {run.get('added') or 0:>4,}  findings {run.get('clusters') or 0:>5,}"
            )
        return
    o = Consolidate(execute, agent=agent_id, max_share=max_share, undo=undo_run, force=force)
    progress = _Progress(enabled=not as_json)
    try:
        result = _run(
            config,
            "consolidate",
            lambda client: _via_daemon(client, config, o, progress),
            lambda store: _directly(config, store, ConsolidateOptions.of(o), progress),
            embed=config.conversation.llm is not None and not undo_run,
        )
    finally:
        progress.close()
    if as_json:
        echo_json(result)
    else:
        _print_consolidation(result)
    sys.exit(1 if result.get("state") == "refused" else 0)


def _directly(config: Config, store, options, progress) -> dict:
    from daemon.ops.consolidation import consolidate
    from layers.conversation.consolidation.store_view import StoreFace

    return consolidate(config, StoreFace(store), options, store.settings.llm, progress.show)


def _via_daemon(client, config: Config, o, progress) -> dict:
    """The run as one admin request; its progress read from the daemon's status meanwhile."""
    import threading

    from daemon.front.daemon_client import connect

    outcome: dict = {}

    def work() -> None:
        try:
            outcome["result"] = client.call(o)
        except BaseException as exc:  # raised again below, on the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    with connect(config, timeout=5) as watcher:
        while thread.is_alive():
            thread.join(0.5)
            if not progress.enabled:
                continue
            try:
                running = (watcher.status().get("conversation") or {}).get("consolidation")
            except Exception:
                continue
            if running:
                progress.show(running["phase"], running["done"], running["total"])
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class _Progress:
    """On a terminal one line rewritten in place; otherwise (cron, a pipe) a line a phase, and every 30 s."""

    EVERY_S = 30.0

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.phase = ""
        self.last = 0.0
        self.shown = False

    def show(self, phase: str, done: int, total: int) -> None:
        import time

        if not self.enabled or phase == "start":
            return
        line = f"consolidate: {phase} {done:,}/{total:,}" if total else f"consolidate: {phase}"
        if self.tty:
            click.echo(f"\r{line:<60}", nl=False, err=True)
            self.shown = True
        elif phase != self.phase or time.monotonic() - self.last >= self.EVERY_S:
            click.echo(line, err=True)
            self.last = time.monotonic()
        self.phase = phase

    def close(self) -> None:
        if self.shown:
            click.echo("", err=True)
            self.shown = False


def _print_consolidation(result: dict) -> None:
    result = for_terminal(result)  # memory texts and notes are the agents': escaped on the terminal
    if result.get("undo"):
        u = result["undo"]
        forced = " (forced over later changes)" if u.get("forced") else ""
        click.echo(
            f"undid run {result['run_id']}: {u['restored']} memories restored, "
            f"{u['deleted']} added ones deleted{forced}"
        )
        return
    verb = {"planned": "would invalidate", "applied": "invalidated", "refused": "would invalidate"}
    click.echo(
        f"run {result['run_id']} ({result['mode']}): {result['state']}; scanned {result['scanned']:,}, "
        f"valid {result['valid']:,}"
    )
    for agent, c in result["agents"].items():
        click.echo(
            f"  agent {agent:<12} valid {c['valid']:>7,}  {verb.get(result['state'], 'invalidated')} "
            f"{c['invalidated']:>6,} ({c['share']:.1%}: folded {c['folded']:,}, resolved {c['resolved']:,}, "
            f"summarised {c['summarised']:,})  added {c['added']:,}  conflicts {c['conflicts']:,}  "
            f"task groups {c['task_groups']:,}"
        )
    for cluster in result["clusters"][:20]:
        members = "; ".join(m["text"][:40] for m in cluster["members"][:3])
        more = f" (+{len(cluster['members']) - 3})" if len(cluster["members"]) > 3 else ""
        note = f" [{cluster['note']}]" if cluster.get("note") else ""
        click.echo(f"  #{cluster['cluster']:<4} {cluster['kind']:<8} {cluster['action']:<9} {members}{more}{note}")
    if len(result["clusters"]) > 20:
        click.echo(f"  … and {len(result['clusters']) - 20:,} more findings in the report")
    for skipped in result.get("skipped") or []:
        click.echo(f"  skipped {skipped['id']}: {skipped['why']}")
    if result.get("refused"):
        click.echo(result["refused"], err=True)
    click.echo(f"report: {result['report']}")
    if result["state"] == "applied" and result.get("changed"):
        click.echo(f"undo:   memstrata consolidate --undo {result['run_id']}")


@click.command("backup")
@click.option("--keep", default=DEFAULT_KEEP, show_default=True, type=click.IntRange(min=1), help="Backups to keep.")
@json_option
@click.pass_context
def backup_cmd(ctx, keep: int, as_json: bool) -> None:
    """Snapshot the conversation store into state_dir/backups, keeping the newest --keep.

    The embedded store is copied consistently (SQLite's online backup) while
    the daemon runs; a remote collection is snapshotted by the Qdrant server
    and downloaded.
    """
    from daemon.ops.maintenance import backup
    from protocol.operations import Backup

    config = config_of(ctx)
    result = _run(
        config,
        "backup",
        lambda client: client.call(Backup(keep=keep)),
        lambda store: backup(config, store, keep),
    )
    if as_json:
        echo_json(result)
        return
    click.echo(f"backup   {result['backup']} ({result['bytes'] / 1e6:.1f} MB)")
    for path in result["removed"]:
        click.echo(f"removed  {path}")


@click.command("restore-backup")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def restore_cmd(ctx, path: Path, as_json: bool) -> None:
    """Put the conversation store back as it was in backup PATH.

    The embedded store's current files are kept beside it (edge.before-restore-…); the two
    newest such copies stay, older ones are deleted. Memories written since the backup are
    gone afterwards: take a backup first.
    """
    from daemon.ops.maintenance import restore
    from protocol.operations import Restore

    config = config_of(ctx)
    path = path.absolute()
    result = _run(
        config,
        "restore-backup",
        lambda client: client.call(Restore(str(path))),
        lambda store: restore(store, path),
    )
    if as_json:
        echo_json(result)
        return
    click.echo(f"restored {result['restored']}")
    if result.get("previous_store_kept_at"):
        click.echo(f"previous store kept at {result['previous_store_kept_at']}")
    for path in result.get("removed_previous_stores") or ():
        click.echo(f"removed  {path} (an older restore's previous store)")
