"""CLI: ``memstrata install`` and ``memstrata uninstall`` (the logic is daemon/ops/install.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from daemon.front.options import echo_json, json_option
from protocol.locations import OPENCLAW_ROOT, SYSTEM_CONFIG

if TYPE_CHECKING:
    from daemon.ops import install as installer

_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Configuration file to write or keep (default: memstrata's --config, else {SYSTEM_CONFIG}).",
)
_dry_run_option = click.option("--dry-run", is_flag=True, help="Print every action; change nothing.")
# For tests and packaging: system paths (units, cron.d, state, runtime) under DIR, systemd not asked.
_destdir_option = click.option("--destdir", type=click.Path(file_okay=False, path_type=Path), hidden=True)


def _config_path(ctx: click.Context, given: Path | None) -> Path:
    return given or ctx.obj.get("config_path") or SYSTEM_CONFIG


def _report(plan: installer.Plan, dry_run: bool, as_json: bool, title: str) -> None:
    from daemon.ops import install as installer

    if not as_json:
        if not plan.actions:
            click.echo(f"nothing to do: memstrata is {title} as asked")
        for line in plan.kept:
            click.echo(f"{'kept':<16} {line}")
    echo = None if as_json else click.echo
    try:
        plan.execute(dry_run, echo)
    except (installer.InstallError, OSError) as exc:
        raise click.ClickException(f"{exc} (the actions above were done; fix this and run the command again)") from None
    if as_json:
        echo_json(plan.to_json(dry_run))
    else:
        for warning in plan.warnings:
            click.echo(f"WARNING: {warning}", err=True)
        if plan.next_steps and not dry_run:
            steps = "".join(f"    {step}\n" for step in plan.next_steps)
            click.echo(f"\nnext, to start it and check:\n{steps}", nl=False)
    sys.exit(plan.exit_code)


def _need_root(destdir: Path | None, dry_run: bool, scratch: bool = False) -> None:
    if destdir is None and not scratch and not dry_run and os.geteuid() != 0:
        raise click.ClickException("run this as root (sudo): it writes /etc and system directories")


@click.command("install")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"OpenClaw root for a new configuration (default {OPENCLAW_ROOT}; an existing one names its own).",
)
@_config_option
@click.option(
    "--cron", is_flag=True, help="Schedule backup, cleanup and consolidation with /etc/cron.d/mem0-cleanup, not timers."
)
@click.option(
    "--units-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the unit files (and the cron file) here and do not ask systemd: to try install in a scratch tree.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="State directory of a new configuration (its socket in DIR/run) instead of /var/lib/memstrata.",
)
@_dry_run_option
@json_option
@_destdir_option
@click.pass_context
def install_cmd(
    ctx: click.Context,
    root: Path | None,
    config_path: Path | None,
    cron: bool,
    units_dir: Path | None,
    state_dir: Path | None,
    dry_run: bool,
    as_json: bool,
    destdir: Path | None,
) -> None:
    """Install memstrata as a systemd service from this checkout (as root; safe to run again).

    \b
    - writes the configuration with absolute paths (an existing one is kept as it is)
    - creates root, workspace, agents, audit, state and socket directories
    - installs the skill into every agent workspace (skills/mem0-integration, with a
      launcher naming this virtualenv), and the example project registry if none exists
    - installs memstrata.service and the backup/cleanup/consolidate timers into /etc/systemd/system
      with this checkout's paths (or, with --cron, /etc/cron.d/mem0-cleanup instead of
      the timers), runs daemon-reload and enables them; a file found in their place that
      install did not write is backed up first (NAME.bak-TIMESTAMP)

    It does not start the daemon: it prints the `systemctl start memstrata` line.

    \b
    To try it all in a scratch tree, as any user:
      memstrata install --root T/openclaw --config T/memstrata.yaml \\
                        --state-dir T/state --units-dir T/units
    Exit status: 0 done; 1 an error (the message says what was done before it);
    3 files written but systemd could not be asked (systemctl missing, or systemd not
    running: units enabled for the next boot, daemon-reload and starting skipped).
    """
    from daemon.ops import install as installer

    _need_root(destdir, dry_run, scratch=units_dir is not None and (state_dir is not None or config_path is not None))
    config_path = _config_path(ctx, config_path)
    try:
        plan = installer.plan_install(
            root, config_path, cron=cron, destdir=destdir or Path("/"), units_dir=units_dir, state_dir=state_dir
        )
    except installer.InstallError as exc:
        raise click.ClickException(str(exc)) from None
    _report(plan, dry_run, as_json, "installed")


@click.command("uninstall")
@_config_option
@_dry_run_option
@json_option
@_destdir_option
@click.pass_context
def uninstall_cmd(
    ctx: click.Context, config_path: Path | None, dry_run: bool, as_json: bool, destdir: Path | None
) -> None:
    """Stop and remove what `memstrata install` installed; keep every piece of data.

    Stops and disables memstrata.service and the timers, removes the unit files and
    /etc/cron.d/mem0-cleanup that install wrote (files it did not write are left), and
    the skill code it put in the workspaces (edited files and project_registry.yaml
    stay). Kept: the configuration, the state directory (tokens, L4 store, backups),
    the workspaces with their git history, the indexes and the registry.
    Exit status as for install.
    """
    from daemon.ops import install as installer

    _need_root(destdir, dry_run)
    plan = installer.plan_uninstall(_config_path(ctx, config_path), destdir=destdir or Path("/"))
    _report(plan, dry_run, as_json, "uninstalled")
