"""CLI for L4 maintenance: cleanup (cron at 03:00 UTC), backup (02:15 UTC), restore-backup.

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

from daemon.front.options import config_of, echo_json, json_option
from daemon.shared.settings import DEFAULT_KEEP
from layers.conversation.policy import MEMORY_TYPES, VISIBILITIES

if TYPE_CHECKING:
    from daemon.shared.config import Config

# A backup or cleanup started with the daemon (a timer with Persistent=true at boot) finds it
# starting: the state locked, its socket not there yet.  It waits this long for one of the two.
DAEMON_START_WAIT_S = 60.0


class _DaemonStarting(Exception):
    """The state is locked by another process, which has no socket up (yet)."""


@contextlib.contextmanager
def _direct_store(config: Config, command: str) -> Iterator:
    """The store opened by this process (no embedder: maintenance never embeds)."""
    from daemon.shared.errors import DaemonError
    from daemon.shared.settings import acquire_state_lock, store_settings
    from layers.conversation.store import ConversationStore

    lock = None
    if config.conversation.backend == "embedded":
        try:
            lock = acquire_state_lock(config.paths.state_dir, f"memstrata {command}")
        except DaemonError as exc:
            raise _DaemonStarting(str(exc)) from None
    store = ConversationStore(store_settings(config), embedder=None, dim=0)  # type: ignore[arg-type]
    try:
        yield store
    finally:
        store.close()
        if lock is not None:
            lock.close()


def _run(config: Config, command: str, via_daemon: Callable, directly: Callable) -> dict:
    """``via_daemon(client)`` when the embedded store is the daemon's; else ``directly(store)``.

    A daemon that is starting (state locked, no socket yet) is waited for, up to
    DAEMON_START_WAIT_S; the daemon itself waits for its store to open.
    """
    import time

    deadline = time.monotonic() + DAEMON_START_WAIT_S
    while True:
        try:
            return _run_once(config, command, via_daemon, directly)
        except _DaemonStarting as exc:
            if time.monotonic() >= deadline:
                raise click.ClickException(
                    f"{exc}; waited {DAEMON_START_WAIT_S:g} s for the daemon to start or the other command to end"
                ) from None
            time.sleep(0.25)


def _run_once(config: Config, command: str, via_daemon: Callable, directly: Callable) -> dict:
    from daemon.front.client import DaemonRequestError, DaemonUnavailableError, connect
    from layers.conversation.store import StoreConfigError, StoreUnavailableError

    if config.conversation.backend == "embedded":
        try:
            with connect(config, timeout=3600) as client:
                return via_daemon(client)
        except DaemonRequestError as exc:
            raise click.ClickException(str(exc)) from None
        except DaemonUnavailableError:
            pass  # the daemon is down: this process may open the store
    try:
        with _direct_store(config, command) as store:
            return directly(store)
    except (StoreUnavailableError, StoreConfigError) as exc:
        raise click.ClickException(f"the conversation store is unreachable: {exc}") from None
    except (ValueError, FileNotFoundError) as exc:
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
    from daemon.ops.maintenance import CleanupOptions, cleanup
    from layers.conversation.cleanup import Selection

    if dry_run == execute:
        raise click.UsageError("give exactly one of --dry-run (preview) and --execute (delete)")
    if include_permanent and max_age_days is None:
        raise click.UsageError("--include-permanent needs --max-age-days")
    config = config_of(ctx)
    options = CleanupOptions(
        execute, max_age_days, include_permanent, Selection(agent_id, visibility, project, memory_type)
    )
    result = _run(
        config,
        "cleanup",
        lambda client: client.admin("cleanup", options.to_dict()),
        lambda store: cleanup(config, store, options),
    )
    if as_json:
        echo_json(result)
    else:
        _print_cleanup(result)
    sys.exit(1 if result["errors"] else 0)


def _print_cleanup(result: dict) -> None:
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

    config = config_of(ctx)
    result = _run(
        config,
        "backup",
        lambda client: client.admin("backup", {"keep": keep}),
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

    The embedded store's current files are kept beside it (qdrant.before-restore-…).
    Memories written since the backup are gone afterwards: take a backup first.
    """
    from daemon.ops.maintenance import restore

    config = config_of(ctx)
    path = path.absolute()
    result = _run(
        config,
        "restore-backup",
        lambda client: client.admin("restore", {"path": str(path)}),
        lambda store: restore(store, path),
    )
    if as_json:
        echo_json(result)
        return
    click.echo(f"restored {result['restored']}")
    if result.get("previous_store_kept_at"):
        click.echo(f"previous store kept at {result['previous_store_kept_at']}")
