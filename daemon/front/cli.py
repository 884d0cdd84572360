"""``memstrata``: the command line over the daemon and the layers.

Every command takes ``--config FILE`` (or ``$MEMSTRATA_CONFIG``, else
``/etc/memstrata/memstrata.yaml``, else OpenClaw's defaults).  Errors a person
can fix are one clear message; the exit statuses (0 ok, 1 runtime, 2 usage, 3 daemon
unreachable) and the JSON form of an error are daemon/front/failures.py's.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import click

from daemon import __version__
from daemon.common.terminal import escaped, for_terminal, json_text
from daemon.front import (
    conversation_commands,
    failures,
    fleet_commands,
    install_commands,
    local_commands,
    maintenance_commands,
)
from daemon.front.options import Report, agent_option, config_of, echo_json, front_config, json_option
from layers.common.ids import MAIN_AGENT, check_id
from protocol.locations import CONFIG_ENV, SYSTEM_CONFIG

# The workspace, git, token and skill helpers are imported by the commands that use them: an agent calls
# `search`, `add` and `status` many times a session, and each call paid ~25 ms of CPU for them
# (bench/bench_front.py; tests/daemon/front/test_front.py checks what a light command loads).

if TYPE_CHECKING:
    from daemon.common.config import Config


class MemstrataGroup(click.Group):
    """Ends every call by the table of daemon/front/failures.py: an error a user can act on is one
    line (or one JSON object with ``--json``) and its exit status, not a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # type: ignore[override]
        if not standalone_mode:  # a caller that handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        args = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:
            failure = failures.classify(exc)
            if failure is None:
                raise
            failures.show(failure, failures.wants_json(args))
            sys.exit(failure.exit_code)
        sys.exit(code if isinstance(code, int) else 0)  # click answers --help and --version with a code


def _workspace_file(workspace: Path, file: str) -> str:
    """Normalise a user-given file to a workspace-relative path, refusing escapes."""
    path = Path(file)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(workspace.resolve())
        except ValueError:
            raise ValueError(f"{file} is not inside the workspace {workspace}") from None
    rel = PurePosixPath(path.as_posix())
    if ".." in rel.parts or not rel.parts:
        raise ValueError(f"{file!r}: give a path inside the workspace (no '..')")
    return rel.as_posix()


@click.group(cls=MemstrataGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    help=f"Configuration file (default: ${CONFIG_ENV}, else {SYSTEM_CONFIG}, else built-in defaults).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log what commands do (the daemon logs per log.level).")
@click.version_option(__version__, prog_name="memstrata")
@click.pass_context
def main(ctx: click.Context, config_path: Path | None, verbose: bool) -> None:
    """memstrata: four-layer, local-first memory for clusters of AI agents.

    \b
    L1 core           CORE_INDEX/IDENTITY/SOUL/USER.md, loaded at session start  (memstrata core)
    L2 daily          MEMORY.md + memory/YYYY-MM-DD.md, versioned with git      (memstrata note, history, restore)
    L3 local          per-agent SQLite FTS5 index (offline)
    L4 conversation   Mem0/Qdrant memory shared across agents

    Start with `memstrata init --root DIR`, then `memstrata --config DIR/memstrata.yaml run`.
    Inside an agent's workspace, --agent defaults to that agent.

    \b
    Exit status: 0 ok, 1 runtime failure, 2 usage error (bad option, invalid id,
    unknown agent), 3 daemon unreachable. With --json, an error is
    {"error": {"code": ..., "message": ...}} on stdout, with the same status.
    Colour only on a terminal, and never with NO_COLOR set or TERM=dumb.
    """
    ctx.ensure_object(dict)["config_path"] = config_path
    if not failures.colour_allowed():
        ctx.color = False  # inherited by every subcommand's context
    # Commands report through their output; their log lines would repeat it.
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")


# ---------------------------------------------------------------- set-up


@main.command()
@click.option("--root", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to set up.")
@json_option
@click.pass_context
def init(ctx: click.Context, root: Path, as_json: bool) -> None:
    """Set up a self-contained root: config, main workspace (with git), registry.

    Every path of the written DIR/memstrata.yaml lies under DIR. Safe to run again:
    existing files are never overwritten.
    """
    from daemon.common import skill
    from daemon.common.config import demo_config_text, load_config
    from daemon.common.tokens import TokenStore
    from daemon.common.workspaces import create_workspace, make_agent
    from layers.common.fsutil import atomic_write, private_dirs

    root = root.expanduser().absolute()
    root.mkdir(parents=True, exist_ok=True)
    report = Report(as_json)
    config_path = root / "memstrata.yaml"
    if config_path.exists():
        report.say(f"kept     {config_path}")
    else:
        atomic_write(config_path, demo_config_text(root))
        report.say(f"created  {config_path}")
    config = load_config(config_path)
    ctx.obj["config"] = config
    existing = config.paths.workspace
    if existing.is_dir() and not existing.is_symlink() and any(existing.iterdir()):
        # A workspace someone already has (OpenClaw's own, with its own repository): kept as it is,
        # no template file added and no commit made in it; the daemon versions what it finds there.
        agent = make_agent(config, MAIN_AGENT)
        report.say(f"kept     {agent.workspace} (an existing workspace: no file added, no commit)")
    else:
        agent, _ = create_workspace(config, MAIN_AGENT)
        report.say(f"created  {agent.workspace} (main workspace, git)")
    for directory in (config.paths.agents_dir, config.paths.socket.parent):
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
    private_dirs(config.paths.state_dir)
    _make_audit_dir(config, report)
    _install_skill(config, MAIN_AGENT, agent.workspace, report)
    for line in skill.seed_registry(config.paths.workspace, config.paths.registry):
        report.say(line)
    _register(config, MAIN_AGENT, (), report, can_write_public=True)  # the hub curates cluster-wide memory
    tokens = TokenStore(config.paths.state_dir)
    tokens.ensure_admin()
    tokens.ensure(MAIN_AGENT, agent.workspace)
    report.say(f"\nnext: memstrata --config {config_path} run")
    report.done(config=str(config_path), workspace=str(agent.workspace))


def _make_audit_dir(config: Config, report: Report) -> None:
    """``audit_dir`` (the daemon's audit, the cron jobs' logs) and the other directories the daemon,
    the units and the cron lines write to; in a workspace, made without following symlinks."""
    from daemon.ops.install import make_directories

    for action in make_directories(config):
        report.say(f"created  {action.target} ({action.detail})")


def _install_skill(config: Config, agent_id: str, workspace: Path, report: Report) -> None:
    """The memory skill in ``{workspace}/skills/mem0-integration``, with its launcher (see daemon/common/skill.py)."""
    from daemon.common import skill
    from layers.common.safefs import UnsafePathError

    launcher = skill.Launcher.current(config.source, agent_id)
    try:
        changes = skill.sync_skill(workspace, launcher)
    except UnsafePathError as exc:
        click.echo(escaped(f"skill not installed: {exc}"), err=True)
        return
    if changes:
        report.say(f"skill    {workspace / skill.SKILL_REL} ({len(changes)} files written)")


def _register(
    config: Config,
    agent_id: str,
    projects: tuple[str, ...],
    report: Report,
    can_write_public: bool | None = None,
    keywords: tuple[str, ...] = (),
) -> None:
    from layers.conversation.policy import registry as project_registry

    registry = project_registry.load_registry(config.paths.registry)
    known = agent_id in registry.data.agents
    have = registry.keywords()
    keywords_known = all(
        set(keywords or (p,)) <= set(have.get(p, ())) or (not keywords and have.get(p)) for p in projects
    )
    if known and set(projects) <= registry.projects_of(agent_id) and keywords_known:
        return  # never rewrite a registry that already says it
    project_registry.add_agent(config.paths.registry, agent_id, projects, can_write_public, keywords)
    report.say(
        f"recorded {agent_id} in {config.paths.registry}" + (f" (projects: {', '.join(projects)})" if projects else "")
    )


@main.group()
def agent() -> None:
    """Create and list agents."""


@agent.command("add")
@click.argument("agent_id", metavar="ID")
@click.option("--project", "projects", multiple=True, metavar="P", help="Project the agent belongs to (repeatable).")
@click.option(
    "--keywords",
    metavar="K1,K2",
    help="Words that put an agent's memory into the project (with one --project; default: the project's name).",
)
@click.option("--can-write-public", is_flag=True, default=None, help="Allow the agent to write public memories.")
@json_option
@click.pass_context
def agent_add(
    ctx: click.Context,
    agent_id: str,
    projects: tuple[str, ...],
    keywords: str | None,
    can_write_public: bool | None,
    as_json: bool,
) -> None:
    """Create agents/ID-workspace from the template (with git), record it in the registry
    and give it an API token (ID-workspace/.memstrata/token, mode 0600); install the
    memory skill into it (skills/mem0-integration).

    A project new to the registry gets --keywords, else its own name, as keywords:
    a memory written without a visibility whose text contains one goes to that
    project. IDs are 1-64 characters of a-z, 0-9, '_' and '-', starting with a
    letter or digit.
    """
    from daemon.common.tokens import WORKSPACE_TOKEN, TokenStore
    from daemon.common.workspaces import create_workspace

    check_id(agent_id)
    for project in projects:
        check_id(project, "project")
    words = tuple(w.strip() for w in (keywords or "").split(",") if w.strip())
    if keywords is not None and len(projects) != 1:
        raise click.UsageError("--keywords belongs to one project: give exactly one --project with it")
    if keywords is not None and not words:
        raise click.UsageError("--keywords: give at least one word (comma-separated)")
    if agent_id == MAIN_AGENT:
        raise click.ClickException("'main' is the main workspace's agent; `memstrata init` creates it")
    config = config_of(ctx)
    if not config.paths.workspace.is_dir():
        raise click.ClickException(f"no main workspace at {config.paths.workspace}: run `memstrata init` first")
    report = Report(as_json)
    agent_obj, created = create_workspace(config, agent_id)
    report.say(f"{'created' if created else 'exists '}  {agent_obj.workspace}")
    _register(config, agent_id, projects, report, can_write_public, words)
    if TokenStore(config.paths.state_dir).ensure(agent_id, agent_obj.workspace):
        report.say(f"token    {agent_obj.workspace / WORKSPACE_TOKEN}")
    _install_skill(config, agent_id, agent_obj.workspace, report)
    report.done(agent=agent_id, workspace=str(agent_obj.workspace), created=created)


@agent.command("restore-from-remote")
@click.argument("agent_id", metavar="ID")
@click.option("--host", metavar="NAME", help="The host whose copy to restore (default: this host's fleet.host).")
@json_option
@click.pass_context
def agent_restore_from_remote(ctx: click.Context, agent_id: str, host: str | None, as_json: bool) -> None:
    """Bring agent ID back from the central remote (git.remote) onto this host.

    For a host that lost an agent (its disk, its state directory) or a new host taking it over:
    the agent's history copy and its workspace are rebuilt from what the daemon pushed to
    refs/memstrata/HOST/ID/ (every file, every commit, and any history it rewrote), then the
    agent is recorded in the registry and given a token and the memory skill, as `agent add`
    does. The running daemon finds the workspace and indexes its files; its L4 memories are the
    hub's and need nothing. Refused, with nothing changed, when the agent exists here (a
    workspace with files in it, or a history copy), when the remote has nothing for it, or when
    the remote cannot be reached.
    """
    from daemon.common.tokens import WORKSPACE_TOKEN, TokenStore
    from daemon.front.failures import Failure
    from daemon.ops.remote_restore import RestoreError, restore_agent

    config = config_of(ctx)
    if not config.paths.workspace.is_dir():
        raise click.ClickException(f"no main workspace at {config.paths.workspace}: run `memstrata init` first")
    try:
        done = restore_agent(config, agent_id, host)
    except RestoreError as exc:
        raise Failure(str(exc), exc.code) from None
    report = Report(as_json)
    report.say(
        f"restored {done.workspace} from host {done.host}: {done.commits} commits, {done.files} files"
        + (f", {len(done.lost)} lost histories kept" if done.lost else "")
    )
    report.say(f"history  {done.copy}")
    _register(config, agent_id, (), report)
    if TokenStore(config.paths.state_dir).ensure(agent_id, done.workspace):
        report.say(f"token    {done.workspace / WORKSPACE_TOKEN}")
    _install_skill(config, agent_id, done.workspace, report)
    report.done(
        agent=agent_id,
        host=done.host,
        workspace=str(done.workspace),
        commit=done.commit,
        commits=done.commits,
        files=done.files,
        lost=done.lost,
    )


@agent.command("token")
@click.argument("agent_id", metavar="ID")
@json_option
@click.pass_context
def agent_token(ctx: click.Context, agent_id: str, as_json: bool) -> None:
    """Issue a new API token for agent ID (the old one stops working at once).

    The token itself is written to the workspace, never printed (nor in --json).
    """
    from daemon.common.tokens import WORKSPACE_TOKEN, TokenStore
    from daemon.common.workspaces import get_agent

    config = config_of(ctx)
    agent_obj = get_agent(config, agent_id)
    TokenStore(config.paths.state_dir).issue(agent_id, agent_obj.workspace)
    if as_json:
        echo_json({"agent": agent_id, "token_file": str(agent_obj.workspace / WORKSPACE_TOKEN)})
    else:
        click.echo(escaped(f"token    {agent_obj.workspace / WORKSPACE_TOKEN}"))


@agent.command("list")
@json_option
@click.pass_context
def agent_list(ctx: click.Context, as_json: bool) -> None:
    """List agents with their workspaces and projects."""
    from daemon.common.workspaces import discover
    from layers.conversation.policy.registry import load_registry

    config = config_of(ctx)
    registry = load_registry(config.paths.registry)
    rows = [
        {"id": a.id, "workspace": str(a.workspace), "projects": sorted(registry.projects_of(a.id))}
        for a in discover(config)
    ]
    if as_json:
        echo_json(rows)
        return
    for row in for_terminal(rows):
        projects = f"  [{', '.join(row['projects'])}]" if row["projects"] else ""
        click.echo(f"{row['id']:<16} {row['workspace']}{projects}")


# ---------------------------------------------------------------- daemon


@main.command()
@click.pass_context
def run(ctx: click.Context) -> None:
    """Run the daemon in the foreground (systemd: Type=notify).

    Watches every workspace, commits L1/L2 changes to git, serves the local API on
    the configured Unix socket. SIGTERM makes the final commits and exits within
    8 s, leaving what cannot finish for the next start; SIGHUP reloads the
    configuration.
    """
    from daemon.service.early_signals import early_signals
    from layers.common import malloc

    early_signals.install()  # a SIGHUP or SIGTERM while the daemon is built is applied, not fatal
    # before any thread starts: at most two malloc arenas, a fixed mmap threshold (layers/common/malloc.py)
    malloc.tune()

    from daemon.api.app import SocketInUseError
    from daemon.common.domain_errors import DaemonError
    from daemon.common.logs import setup_logging
    from daemon.common.settings import guard_from
    from daemon.service.memory_daemon import MemoryDaemon

    config = config_of(ctx)
    setup_logging(config.log.level, guard_from(config), config.log.format)
    from daemon.common.memtrace import start_from_env

    start_from_env()  # MEMSTRATA_TRACEMALLOC_MIN: allocation snapshots for the soak benchmark (off by default)
    faulthandler.enable()  # a crash in native code (llama.cpp, SQLite) still leaves a traceback in the journal
    try:
        code = MemoryDaemon(config).run()
    except (DaemonError, SocketInUseError, PermissionError) as exc:
        raise click.ClickException(str(exc)) from None
    # The daemon has committed, saved and closed everything it owns.  The interpreter's teardown
    # would only free memory, and took 2.5-3 s of the stop budget on a busy 2-core host (measured);
    # it could also free what a thread left inside native code (llama.cpp, the store) still uses.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@main.command()
@click.option("--agent", "agent_id", metavar="ID", help="One agent's detail (default: one line per agent).")
@click.option("--watch", is_flag=True, help="Show it again every --interval seconds, until Ctrl-C.")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.2), help="With --watch.")
@click.option("--fleet", is_flag=True, help="On the hub: every host, when it was last heard from, its agents' backlog.")
@json_option
@click.pass_context
def status(ctx: click.Context, agent_id: str | None, watch: bool, interval: float, fleet: bool, as_json: bool) -> None:
    """Show the daemon and every agent: a summary line (healthy, or how many problems), the
    problems, the daemon's state, then one line per agent (--agent ID: that agent's detail).

    --fleet, on the hub (the host whose git.remote is the path of the fleet's repository): each
    host, when the hub last received its report (SILENT after fleet.silent_after_s), its version,
    its agents' push backlogs, their last pushed commits and refused refs.

    Works when the daemon is down (reads disk and git, says so). Exit status: 0
    when the daemon runs, 3 when it does not (as `systemctl status`). Every agent's
    details need the administrator's token (root reads it from the state directory);
    with $MEMSTRATA_TOKEN of an agent, that agent's; without a token, health only.
    With --watch --json: one JSON document per line.
    """
    if agent_id is not None:
        check_id(agent_id)
    if fleet:
        _fleet_status(ctx, agent_id, watch, interval, as_json)
        return
    if watch:
        # Ctrl-C is how --watch ends, so it must raise KeyboardInterrupt whatever this process inherited.
        # A program started in the background by a non-interactive shell (`make test &`, a CI runner, nohup)
        # inherits SIGINT *ignored*, and Python then leaves it ignored: --watch never ended (issue 44).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    data: dict | None = None
    try:
        data = _status_document(ctx, agent_id)
        while True:
            if watch and sys.stdout.isatty() and not as_json:
                click.clear()
            if as_json:
                click.echo(json_text(data)) if watch else echo_json(data)
            else:
                click.echo(render_status(data, agent_id), nl=False)
            if not watch:
                break
            time.sleep(interval)
            data = _status_document(ctx, agent_id)
    except KeyboardInterrupt:  # how --watch ends
        if data is None:
            sys.exit(130)  # interrupted before the first answer: as a shell reports a SIGINT
    sys.exit(0 if data["daemon"]["running"] else 3)


def _fleet_status(ctx: click.Context, agent_id: str | None, watch: bool, interval: float, as_json: bool) -> None:
    from daemon.front.fleet_status import fleet_document, render

    if agent_id is not None:
        raise failures.UsageFailure("--fleet shows every host: it takes no --agent")
    if watch:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # see status: how --watch ends
    try:
        while True:
            data = fleet_document(ctx)
            if watch and sys.stdout.isatty() and not as_json:
                click.clear()
            if as_json:
                click.echo(json_text(data)) if watch else echo_json(data)
            else:
                click.echo(render(data), nl=False)
            if not watch:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def _status_document(ctx: click.Context, agent_id: str | None) -> dict:
    """The daemon's status document (or the offline survey); with ``agent_id``, that agent's part."""
    from daemon.front.daemon_client import DaemonUnavailableError, connect
    from daemon.front.status import offline_status

    try:
        with connect(front_config(ctx), timeout=5) as client:
            data: dict = dict(client.status())
    except DaemonUnavailableError as exc:
        data = dict(offline_status(config_of(ctx), str(exc)))  # reads the layers: the whole configuration
    if agent_id is not None and "agents" in data:
        mine = [a for a in data["agents"] if a["id"] == agent_id]
        if not mine:
            known = ", ".join(a["id"] for a in data["agents"]) or "none"
            raise failures.UsageFailure(f"unknown agent {agent_id!r} (known agents: {known})", "unknown_agent")
        data["agents"] = mine
    return data


def render_status(data: dict, agent_id: str | None) -> str:
    from daemon.front.status import render

    return render(data, agent_id)  # type: ignore[arg-type]  # the document as the daemon sent it


# ---------------------------------------------------------------- L1 / L2


@main.command("core")
@agent_option
@click.option(
    "--budget", type=click.IntRange(min=1), metavar="TOKENS", help="Token budget (default: core.budget_tokens)."
)
@click.option("--all", "on_demand", is_flag=True, help="Also load the on-demand files (AGENTS.md, TOOLS.md).")
@json_option
@click.pass_context
def core_cmd(ctx: click.Context, agent_id: str, budget: int | None, on_demand: bool, as_json: bool) -> None:
    """Print the agent's session-start bundle: shared core, CORE_INDEX, IDENTITY, SOUL, USER.

    Token counts are estimates (one per CJK character, one per ~4 ASCII characters).
    Over budget, the bundle is cut at a line with a visible marker.
    """
    from daemon.common.workspaces import core_of, get_agent

    config = config_of(ctx)
    bundle = core_of(config, get_agent(config, agent_id), on_demand, budget)
    if as_json:
        click.echo(json_text(json.loads(bundle.to_json()), indent=2))  # controls in the files as \\u escapes
        return
    click.echo(escaped(bundle.render(), keep_newlines=True), nl=False)  # the agent's own files, lines kept
    if bundle.missing:
        click.echo(escaped(f"memstrata: {agent_id}: missing core files: {', '.join(bundle.missing)}"), err=True)


@main.command()
@agent_option
@click.argument("text", nargs=-1)
@json_option
@click.pass_context
def note(ctx: click.Context, agent_id: str, text: tuple[str, ...], as_json: bool) -> None:
    """Append a timestamped line to today's memory/YYYY-MM-DD.md (TEXT, or stdin)."""
    from daemon.common.workspaces import get_agent
    from layers.daily import workspace_repo as daily

    agent_obj = get_agent(front_config(ctx), agent_id)  # the workspace's path is all a note needs
    body = " ".join(text) if text else ("" if sys.stdin.isatty() else sys.stdin.read())
    path = daily.append_note(agent_obj.workspace, body)
    if as_json:
        echo_json({"agent": agent_id, "file": str(path)})
    else:
        click.echo(escaped(str(path)))


@main.command()
@agent_option
@click.argument("file", required=False)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--memory", "memory_id", metavar="ID", help="Instead: the ADD/UPDATE/DELETE events of L4 memory ID.")
@json_option
@click.pass_context
def history(
    ctx: click.Context, agent_id: str, file: str | None, limit: int, memory_id: str | None, as_json: bool
) -> None:
    """Show the git history of the agent's memory (or of one FILE, across renames).

    With --memory ID: the changes of one L4 memory (conversation memory) instead.
    """
    if memory_id:
        from daemon.front.conversation_commands import print_memory_history

        if file:
            raise click.UsageError("give a FILE (L2 git history) or --memory ID (L4), not both")
        print_memory_history(ctx, agent_id, memory_id, as_json)
        return
    from daemon.common.workspaces import get_agent, workspace_repo

    config = config_of(ctx)
    agent_obj = get_agent(config, agent_id)
    rel = _workspace_file(agent_obj.workspace, file) if file else None
    repo = workspace_repo(config, agent_obj.workspace, agent_obj.id)
    commits = repo.log(rel, limit) if (agent_obj.workspace / ".git").exists() else []
    kept = repo.kept_elsewhere(rel, limit)  # versions only the daemon's copy still has
    if as_json:
        echo_json(
            [{"sha": c.sha, "time": c.time, "author": c.author, "subject": c.subject} for c in commits]
            + [
                {"sha": c.sha, "time": c.time, "author": c.author, "subject": c.subject, "only_in_copy": True}
                for c in kept
            ]
        )
        return
    if not commits:
        click.echo(escaped("no commits" + (f" touching {rel}" if rel else "")))
    for c in commits:  # a subject is whoever committed's: an agent may write its own history
        click.echo(escaped(f"{c.short}  {c.time}  {c.subject}"))
    if kept and repo.copy is not None:  # only a copy keeps versions the workspace lost
        click.echo(
            f"\nno longer in the workspace's history, kept in the daemon's copy {escaped(str(repo.copy.path))} "
            "(`memstrata restore --at SHA` brings a file back):"
        )
        for c in kept:
            click.echo(escaped(f"{c.short}  {c.time}  {c.subject}"))


@main.command()
@agent_option
@click.argument("file")
@click.option("--at", "rev", required=True, metavar="REV", help="Commit to take FILE from (see `memstrata history`).")
@json_option
@click.pass_context
def restore(ctx: click.Context, agent_id: str, file: str, rev: str, as_json: bool) -> None:
    """Bring FILE back as it was at REV, as a new commit (history is never rewritten)."""
    from daemon.common.settings import guard_from
    from daemon.common.workspaces import get_agent, workspace_repo
    from layers.daily import workspace_repo as daily

    config = config_of(ctx)
    agent_obj = get_agent(config, agent_id)
    rel = _workspace_file(agent_obj.workspace, file)
    repo = workspace_repo(config, agent_obj.workspace, agent_obj.id)
    guard = guard_from(config)

    def refuse_secrets(what: str, content: bytes) -> None:
        findings = guard.scan_text(content.decode("utf-8", errors="replace"))
        if not findings:
            return
        found = "; ".join(map(str, findings))
        if what == "uncommitted edits":
            raise click.ClickException(
                f"{rel} has uncommitted edits that contain what looks like a secret ({found}); no commit holds "
                "them and a restore would destroy them, so nothing was restored: remove the secret and retry"
            )
        raise click.ClickException(f"{rel} at {what} contains what looks like a secret ({found}); not restored")

    for attempt in range(10):
        try:
            done = repo.restore(rel, rev, refuse_secrets)
            break
        except daily.RepoBusyError:
            if attempt == 9:
                raise
            time.sleep(0.5)
    result = {
        "file": rel,
        "from": done.source,
        "changed": done.changed,
        "commit": done.commit.sha if done.commit else None,
        "kept_edits_commit": done.kept_edits_commit.sha if done.kept_edits_commit else None,
        "from_copy": done.from_copy,
    }
    if as_json:
        echo_json(result)
        return
    if done.kept_edits_commit:
        click.echo(
            escaped(
                f"kept the uncommitted edits of {rel} as commit {done.kept_edits_commit.short} "
                f"(no commit held them; `memstrata restore --at {done.kept_edits_commit.short}` brings them back)"
            )
        )
    if done.from_copy:
        click.echo(escaped(f"{done.source[:10]} is no longer in the workspace's history: taken from the daemon's copy"))
    if done.changed and done.commit:
        click.echo(escaped(f"restored {rel} from {done.source[:10]} as commit {done.commit.short}"))
    elif done.changed:
        click.echo(escaped(f"restored {rel} from {done.source[:10]} (the daemon had committed it already)"))
    else:
        click.echo(escaped(f"{rel} already matches {done.source[:10]}; nothing to restore"))


# The L3 commands (search, reindex, model), the L4 ones (add, get, list, update, delete, restore-memory, mcp),
# maintenance (cleanup, consolidate, backup, restore-backup), install/uninstall and fleet live in their own modules.
for command in (
    local_commands.search_cmd,
    local_commands.reindex,
    local_commands.model,
    conversation_commands.add_cmd,
    conversation_commands.mcp_cmd,
    conversation_commands.get_cmd,
    conversation_commands.list_cmd,
    conversation_commands.update_cmd,
    conversation_commands.delete_cmd,
    conversation_commands.restore_memory_cmd,
    maintenance_commands.cleanup_cmd,
    maintenance_commands.consolidate_cmd,
    maintenance_commands.backup_cmd,
    maintenance_commands.restore_cmd,
    install_commands.install_cmd,
    install_commands.uninstall_cmd,
    fleet_commands.fleet,
):
    main.add_command(command)
