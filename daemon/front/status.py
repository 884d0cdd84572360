"""``memstrata status``: what the daemon reports, or a read-only survey when it is down."""

from __future__ import annotations

import contextlib
import json
import unicodedata
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon import __version__
from daemon.common.settings import SNAPSHOT_FILE, guard_from, limits_of
from daemon.common.terminal import for_terminal
from daemon.common.workspaces import discover

if TYPE_CHECKING:  # the documents' types (TypedDicts, ~3 ms to build): `memstrata status` renders plain dicts
    from daemon.common.config import Config
    from daemon.common.contracts import (
        AgentReport,
        ConversationStatus,
        IndexReport,
        ReconcileInfo,
        SharedCoreStatus,
        StatusDocument,
        StorageReport,
        SyncStatus,
    )


def offline_status(config: Config, reason: str) -> StatusDocument:
    """The same report the daemon gives, surveyed from disk and git without writing anything."""
    from daemon.common.contracts import ReconcileInfo
    from daemon.files.tracker import make_tracker  # the offline survey: git and the file readers, only here

    guard = guard_from(config)
    reports: list[AgentReport] = []
    for agent in discover(config):
        tracker = make_tracker(config, agent, guard, record=None)
        tracker.survey()
        report = tracker.report()
        report["index"] = _index_report(agent.index)
        reports.append(report)
    last: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        last = json.loads((config.paths.state_dir / SNAPSHOT_FILE).read_text("utf-8"))
    reconcile: ReconcileInfo = last.get("reconcile") or ReconcileInfo(time=None)
    return {
        "daemon": {
            "running": False,
            "reason": reason,
            "version": __version__,
            "config": str(config.source) if config.source else None,
            "socket": str(config.paths.socket),
            "state_dir": str(config.paths.state_dir),
            "last_seen": (last.get("daemon") or {}).get("stopped"),
        },
        "watcher": {"mode": "not running", "reason": ""},
        "reconcile": reconcile,
        "limits": limits_of(config),
        "vectors": _vectors_report(config),
        "agents": reports,
    }


def _index_report(path: Path) -> IndexReport:
    from layers.local.storage.index import ForeignFile, IndexStale, open_for_reading

    if not path.exists():
        return {"path": str(path), "state": "missing (the daemon builds it)"}
    try:
        with open_for_reading(path) as index:
            ready: IndexReport = {"path": str(path), "state": "ready"}
            return {**ready, **index.stats()}
    except ForeignFile as exc:
        return {"path": str(path), "state": "refused", "error": str(exc)}
    except (IndexStale, OSError) as exc:
        return {"path": str(path), "state": f"unusable: {exc} (the daemon rebuilds it)"}


def _vectors_report(config: Config) -> dict[str, Any]:
    from daemon.local.embedding import make_embedder

    embedder = make_embedder(config)
    return embedder.status() if embedder is not None else {"backend": "off"}


#: A document older than this was not built for this call (the loop was busy): status says its age.
STALE_AFTER_S = 2.0
#: The widest line ``status`` prints (columns); a longer one goes on, indented, on the next lines.
WIDTH = 100
_CONTINUED = "    "  # what a line continued on the next one starts with, under its own indentation


def columns(text: str) -> int:
    """How many terminal columns ``text`` takes: wide (CJK) characters two, combining marks none."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _cut_at(text: str, room: int) -> int:
    """Where ``text`` is cut to fit ``room`` columns: after the last space that fits; a word longer than
    the room (a path) is never cut: the cut comes after it."""
    start = len(text) - len(text.lstrip(" "))
    used, fits = 0, len(text)
    for i, c in enumerate(text):
        used += columns(c)
        if used > room:
            fits = i
            break
    space = text.rfind(" ", start, fits + 1)
    if space > start:
        return space + 1
    after = text.find(" ", fits)
    return len(text) if after < 0 else after + 1


def fitted(line: str, width: int = WIDTH) -> list[str]:
    """``line`` as lines of at most ``width`` columns, broken after spaces, each part after the first
    indented four more than the line itself (so it never reads as a new agent or problem).  A word
    longer than that (a path) is kept whole, on a line of its own."""
    if columns(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" "))) + _CONTINUED
    out: list[str] = []
    rest = line
    while columns(rest) > width:
        cut = _cut_at(rest, width)
        if cut >= len(rest):
            break
        out.append(rest[:cut].rstrip(" "))
        rest = indent + rest[cut:].lstrip(" ")
    out.append(rest)
    return out


def _clock(iso: str | None) -> str:
    if not iso:
        return "never"
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except ValueError:
        return iso


def duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours or days else []
    return " ".join([*parts, f"{minutes}m {secs}s"])


def _embedding_lines(status: StatusDocument) -> list[str]:
    """How many chunks still wait for vectors, and how long that takes at the worker's recent rate."""
    waiting = sum((a.get("index") or {}).get("pending_embeddings", 0) for a in status.get("agents") or [])
    if not waiting:
        return []
    rate = (status.get("vectors") or {}).get("rate_per_s")
    pace = f", about {duration(waiting / rate)} left at {rate:.1f} chunks/s" if rate else ""
    return [f"  embedding: {waiting:,} chunks waiting{pace} (search uses the vectors made so far)"]


def _edge_index_lines(index: dict[str, Any] | None) -> list[str]:
    """The embedded shard's HNSW index: points it searches by brute force until the next optimize."""
    if not index or "points" not in index:
        return []
    line = f"  index: {index['indexed_vectors']:,} of {index['points']:,} points in the HNSW index"
    if index.get("optimizing_since"):
        line += f"; optimizing a copy since {index['optimizing_since']}"
    elif index.get("pending_writes"):
        line += f"; {index['pending_writes']:,} written since the last optimize"
    lines = [line]
    last = index.get("last_optimize")
    if last:
        lines.append(f"  last optimize: {last['result']} at {last['ended_at']} ({last['seconds']:g} s)")
    return lines


def _replica_lines(c: ConversationStatus) -> list[str]:
    """A spoke's replica of the hub (its seq, lag, age), and the hub's feed with each spoke's lag."""
    lines = []
    section: Mapping[str, Any] = c
    r: Mapping[str, Any] | None = section.get("replica")  # a spoke's (HubConversationStatus)
    if r:
        lag = "?" if r.get("lag") is None else f"{r['lag']:,}"
        age = "never" if r.get("age_s") is None else f"{duration(r['age_s'])} ago"
        lines.append(
            f"  replica of the hub: {r.get('memories', 0):,} memories at seq {r.get('seq', 0):,} (lag {lag}), "
            f"heard {age}, {r.get('rebuilds', 0)} rebuild(s)"
        )
        if r.get("rebuilding"):
            lines.append(f"  replica: rebuilding from the hub's snapshot ({r['rebuilding'].get('why')})")
        if r.get("last_error"):
            lines.append(f"  replica: {r['last_error']}")
        if r.get("not_searchable"):
            lines.append(f"  replica not searched with the hub away: {r['not_searchable']}")
    f: Mapping[str, Any] | None = c.get("feed")
    if f:
        spokes = ", ".join(f"{h} lag {s.get('lag', 0):,}" for h, s in (f.get("spokes") or {}).items())
        lines.append(f"  change feed for the spokes: seq {f.get('seq', 0):,}" + (f" ({spokes})" if spokes else ""))
    return lines


def _conversation_lines(c: ConversationStatus) -> tuple[list[str], list[str]]:
    """L4's section, and its problems (a store unreachable or off, writes set aside, a registry that
    does not load, a failed import): those are listed with the problems at the top instead."""
    if not c.get("enabled"):
        return (["conversation (L4): disabled"] if c else []), []
    where = c["backend"] + (f" {c['url']}" if c.get("url") else "")
    where += f", collection {c.get('collection')}" if c.get("backend") != "hub" else ""  # the hub's own
    problems = []
    if c.get("error"):
        problems.append(f"conversation (L4): {where}: OFF: {c['error']}")
        state = "OFF (above)"
    elif c.get("reachable"):
        state = "reachable" + (f" ({c['rtt_ms']:g} ms)" if c.get("rtt_ms") is not None else "")
    else:
        b = c.get("breaker") or {}
        down = f" for {duration(b['down_for_s'])}" if b.get("down_for_s") is not None else ""
        problems.append(
            f"conversation (L4): UNREACHABLE{down} (breaker open; searches answered from L3): {b.get('last_error')}"
        )
        state = "UNREACHABLE (above)"
    lines = [f"conversation (L4): {where}: {state}"]
    imp = c.get("import") or {}
    if imp.get("state") == "importing":
        lines.append(f"  importing the old local-mode store: {imp.get('done', 0)}/{imp.get('total') or '?'} memories")
    elif imp.get("state") == "failed":
        problems.append(
            f"conversation (L4): import of the old local-mode store failed (tried again at the next start): "
            f"{imp.get('error')}"
        )
    lines.extend(_edge_index_lines(c.get("index")))
    run = c.get("consolidation")
    if run:
        figures = f" {run.get('done', 0):,}/{run.get('total', 0):,}" if run.get("total") else ""
        lines.append(f"  consolidating (memstrata consolidate): {run.get('phase')}{figures}")
    q: Mapping[str, Any] = c.get("queue") or {}
    if q.get("depth"):
        lines.append(f"  queued writes: {q['depth']} (oldest {duration(q.get('oldest_age_s') or 0)} old)")
        section: Mapping[str, Any] = c
        hub = section.get("hub") or {}  # a spoke's (HubConversationStatus)
        replay_error = hub.get("replay_error")  # the last send of a queued add that failed
        if replay_error:
            lines.append(f"  sending them to the hub: {replay_error}")
        if q.get("replay_rate_per_s"):
            eta = duration(q.get("eta_s") or 0)
            lines.append(f"  replaying: {q['replay_rate_per_s']:,.0f} writes/s, about {eta} to go")
    if q.get("set_aside"):
        latest = (q.get("set_aside_recent") or [{}])[0]
        refuser = "the hub" if c.get("backend") == "hub" else "the store"
        problems.append(
            f"conversation (L4): set aside: {q['set_aside']} queued write(s) {refuser} refuses (kept in the queue "
            f"file); latest {latest.get('write_id')} of {latest.get('agent_id')}: {latest.get('reason')}"
        )
    if q.get("unflushed"):
        lines.append(f"  awaiting the store's flush: {q['unflushed']} write(s), kept in the write-ahead log until then")
    if q.get("checkpoint_error"):
        problems.append(
            f"conversation (L4): the store's flush is failing (answered adds stay in the write-ahead log; an "
            f"update or delete is made but answered with an error until a flush works): {q['checkpoint_error']}"
        )
    if q.get("replayed") or q.get("skipped_already_written"):
        lines.append(f"  replayed: {q.get('replayed', 0)} written, {q.get('skipped_already_written', 0)} already there")
    lines.extend(_replica_lines(c))
    use: Mapping[str, Any] = c.get("use") or {}
    if use.get("pending") or use.get("dropped"):  # decay by use: hits counted, not yet written
        dropped = f", {use['dropped']} dropped (too many waiting)" if use.get("dropped") else ""
        lines.append(f"  use counts: {use.get('pending', 0)} memories waiting to be written{dropped}")
    if c.get("last_error") and c.get("reachable"):
        lines.append(f"  last error: {c['last_error']}")
    if c.get("registry_error"):
        problems.append(f"registry: {c['registry_error']}")
    ts = c.get("tailscale")
    if ts:
        if ts.get("host_name"):
            online = "online" if ts.get("online") else "OFFLINE"
            path = ts.get("cur_addr") or (f"relay {ts['relay']}" if ts.get("relay") else "no direct path")
            lines.append(f"  tailscale: peer {ts['host_name']} ({ts['peer']}) {online}, {path}")
        else:
            lines.append(f"  tailscale: {ts.get('reason')}")
    return lines, problems


def _sync_lines(sync: SyncStatus | None) -> tuple[list[str], list[str]]:
    """git.remote: where this host's histories go and how far behind they are; (lines, problems)."""
    if not sync:
        return [], []
    problems = []
    host, remote = sync.get("host", "?"), sync.get("remote")
    agents = sync.get("agents") or []
    behind = sum(a.get("behind_commits", 0) for a in agents)
    owed = f"{behind} commit{'s' if behind != 1 else ''} behind" if behind else "up to date"
    if sync.get("reachable") is False:
        problems.append(
            f"sync: remote {remote or ''} UNREACHABLE since {_clock(sync.get('failing_since'))} "
            f"({owed}; kept, retried in {duration(sync.get('retry_in_s') or 0)}): {sync.get('last_error')}"
        )
    for a in agents:
        for r in a.get("refused") or []:
            problems.append(
                f"sync: {a['id']}: the remote REFUSED {r['remote_ref']} ({r['reason']}) since {_clock(r['since'])}: "
                "its ref moved there; kept back, never forced"
            )
    report = sync.get("report") or {}
    if report.get("error"):
        problems.append(f"sync: this host's report: {report['error']}")
    state = {True: "reachable", False: "UNREACHABLE", None: "not tried yet"}[sync.get("reachable")]
    where = f" to {remote}" if remote else ""
    lines = [f"sync: host {host}{where}: {state}, {owed}; last contact {_clock(sync.get('last_contact'))}"]
    for a in agents:
        if a.get("behind_commits") or a.get("behind_lost"):
            lost = f", {a['behind_lost']} lost histories" if a.get("behind_lost") else ""
            lines.append(f"  {a['id']}: {a.get('behind_commits', 0)} commits behind{lost}")
        for w in a.get("rewound") or []:
            found = f"at {w['found']}" if w.get("found") else "without the ref"
            lines.append(
                f"  {a['id']}: the remote was found REWOUND {_clock(w.get('at'))}: {w['remote_ref']} {found}, "
                f"behind {w['acknowledged'][:12]} it had acknowledged; pushed forward again (see the audit log)"
            )
    shared, shared_problems = _shared_lines(sync.get("shared_core"))
    return lines + shared, problems + shared_problems


def _shared_lines(core: SharedCoreStatus | None) -> tuple[list[str], list[str]]:
    """The shared core: which commit this host holds (or the remote took), how old, what went wrong."""
    if not core:
        return [], []
    problems = []
    role = core.get("role", "?")
    commit = core.get("commit")
    held = f"commit {commit[:12]} of {_clock(core.get('date'))}" if commit else "no commit yet"
    age_s = core.get("age_s")
    age = f" (age {duration(age_s)})" if age_s is not None else ""
    if role == "hub":
        line = f"shared core: hub, pushes {core.get('dir')}: {held}{age}; last push {_clock(core.get('last_push'))}"
    else:
        line = f"shared core: spoke, read-only copy in {core.get('dir')}: {held}{age}"
        line += f"; last fetch {_clock(core.get('last_fetch'))}, every {duration(core.get('poll_s') or 0)}"
    lines = [line]
    if core.get("reachable") is False:
        kept = "the last good copy kept" if role == "spoke" else "shared/ pushed once it answers"
        problems.append(
            f"shared core: remote UNREACHABLE since {_clock(core.get('failing_since'))} ({kept}, {held}{age}; "
            f"retried in {duration(core.get('retry_in_s') or 0)}): {core.get('last_error')}"
        )
    refused = core.get("refused")
    if refused:
        problems.append(
            f"shared core: the remote REFUSED the push ({refused.get('reason')}) since {_clock(refused.get('since'))}: "
            "its ref moved there; never forced, built on at the next change"
        )
    if core.get("held_back"):
        problems.append(f"shared core: not pushed, holding a secret: {', '.join(core['held_back'])}")
    if core.get("waiting"):
        lines.append(f"  {core['waiting']}")
    edit = core.get("local_edit")
    if edit:
        lines.append(
            f"  {edit['note']}; {edit['count']} since start, the last at {_clock(edit['at'])}: "
            + ", ".join(edit["files"])
            + (f" (kept in {edit['kept_in']})" if edit.get("kept_in") else "")
        )
    return lines, problems


def _storage_lines(storage: StorageReport | None) -> list[str]:
    """Writes a full (or read-only) disk refuses, one line per place; they retry by themselves."""
    lines = []
    for p in (storage.get("problems") if storage else None) or []:
        who = f" for {p['agent']}" if p.get("agent") else ""
        where = f" ({p['path']})" if p.get("path") else ""
        lines.append(
            f"STORAGE: writes failing: {p['place']}{who}{where}{': ' + p['error'] if p.get('error') else ''}; "
            f"since {_clock(p.get('since'))}, "
            f"{p.get('failures')} attempt(s), next retry in {p.get('retry_in_s', 0):g} s"
        )
    return lines


def _history_lines(agent: AgentReport) -> list[str]:
    """A history the workspace lost (reset, rewritten, .git removed): what the daemon's copy keeps of it."""
    lost = agent.get("history_lost") or []
    if not lost:
        return []
    newest = lost[0]
    earlier = f" ({len(lost) - 1} earlier)" if len(lost) > 1 else ""
    return [
        f"  HISTORY REWRITTEN (found {_clock(newest['found'])}){earlier}: memstrata's last commit {newest['commit']} "
        f"{newest['subject']!r} and the versions before it are no longer in the workspace's history; "
        f"kept in {newest['copy']}",
        f"    `memstrata history --agent {agent['id']}` lists them; "
        f"`memstrata restore --agent {agent['id']} FILE --at {newest['commit']}` brings a file back",
    ]


def _agent_problems(a: AgentReport) -> list[str]:
    """Everything about one agent a person has to look at: what git or the index does not have,
    and why. Each line is said as the detail view says it."""
    lines = _history_lines(a)
    lines += list(a.get("recovered") or [])  # after a power cut: a repository repaired, a file refilled
    for h in a.get("held_back") or []:
        lines.append(f"HELD BACK from git: {h['path']} line {h['line']} (never_store pattern {h['kind']!r})")
    for name in a.get("naming_violations") or []:
        lines.append(f"naming: {name} does not follow memory/YYYY-MM-DD.md")
    more = (a.get("naming_violations_total") or 0) - len(a.get("naming_violations") or [])
    if more > 0:
        lines.append(f"naming: … and {more:,} more files that do not follow memory/YYYY-MM-DD.md")
    for s in a.get("skipped") or []:
        lines.append(f"ignored: {s['path']}: {s['reason']}")
    held = {h["path"] for h in a.get("held_back") or []}
    for s in a.get("not_indexed") or []:
        if s["path"] not in held:  # a held-back file is kept out of the index too: one problem, said once
            lines.append(f"not indexed: {s['path']}: {s['reason']}")
    ix: IndexReport = a.get("index") or {}
    if ix.get("error"):
        lines.append(f"index error: {ix['error']}")
    elif ix and "chunks" not in ix and not str(ix.get("state", "")).startswith(("missing", "rebuilding")):
        lines.append(f"index: {ix.get('state')}")
    for refused in a.get("refused") or []:
        lines.append(f"REFUSED: {refused['path']}: {refused['reason']}")
    failing = a.get("commits_failing")
    if failing:
        lines.append(
            f"COMMITS FAILING since {_clock(failing['since'])} ({failing['attempts']} attempts, retried "
            f"with back-off): {failing['reason']}"
        )
    if a.get("last_error") and not (failing and failing["reason"] == a["last_error"]):
        lines.append(f"ERROR: {a['last_error']}")
    return [line.strip() for line in lines]


def _ago(iso: str | None) -> str:
    """How long ago, in at most two units: ``5m``, ``3h 2m``, ``4d 1h``."""
    if not iso:
        return "never"
    try:
        then = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    seconds = max(0, int((datetime.now(then.tzinfo) - then).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h ago"
    if hours:
        return f"{hours}h {minutes}m ago"
    return f"{minutes}m ago" if minutes else f"{secs}s ago"


def _agent_line(a: AgentReport, width: int, problems: int) -> str:
    """One agent in one line: files, last commit, index; its problems are counted, listed above."""
    commit = a.get("last_commit")
    parts = [f"{a['id']:<{width}}  {a['files']:>5} files"]
    parts.append(f"last commit {_ago(commit['time'])}" if commit else "no commit")
    ix: IndexReport = a.get("index") or {}
    if "chunks" in ix:
        parts.append(f"{ix['chunks']:,} chunks")
        if ix.get("pending_embeddings"):
            items = f" ({ix['pending_items']:,} for their items)" if ix.get("pending_items") else ""
            parts.append(f"{ix['pending_embeddings']:,} waiting for vectors{items}")
    elif ix.get("state"):
        parts.append(f"index {str(ix['state']).split(' (')[0]}")
    if ix.get("progress"):
        parts.append(f"indexing {ix['progress']['done']}/{ix['progress']['total']}")
    committing = a.get("committing")
    if committing and committing.get("total"):
        parts.append(f"committing {committing['done']:,}/{committing['total']:,}")
    line = ", ".join(parts)
    if a.get("pending_commit"):
        line += " (changes waiting to be committed)"
    if problems:
        line += f"  [{problems} problem{'s' if problems != 1 else ''}]"
    return line


def _agent_detail(a: AgentReport) -> list[str]:
    """``status --agent ID``: everything the report holds about one agent."""
    lines = [f"{a['id']}  {a['workspace']}"]
    commit = a["last_commit"]
    last = f"{commit['sha']} {_clock(commit['time'])} {commit['subject']!r}" if commit else "none"
    pending = "  (changes waiting to be committed)" if a["pending_commit"] else ""
    lines.append(f"  files: {a['files']}   last commit: {last}{pending}")
    committing = a.get("committing")
    if committing:
        done = (
            f"{committing['done']:,} of {committing['total']:,} files"
            if committing["total"]
            else "listing and checking the changes"
        )
        lines.append(f"  committing: {done}")
    ix: IndexReport = a.get("index") or {}
    if "chunks" in ix:
        last_indexed = ix.get("last_indexed")
        indexed = _clock(datetime.fromtimestamp(last_indexed).astimezone().isoformat()) if last_indexed else "never"
        waiting = ix.get("pending_embeddings", 0)
        so_far = f"vectors for {ix['vectors']:,} of them, " if "vectors" in ix and waiting else ""
        lines.append(
            f"  index: {ix['state']}, {ix['files']} files, {ix['chunks']:,} chunks, last indexed {indexed}, "
            f"{so_far}{waiting:,} waiting for vectors"
            + (
                f" ({ix['pending_items']:,} of them have their whole vector, their items wait)"
                if ix.get("pending_items")
                else ""
            )
        )
        lines.append(f"  index identity: {ix.get('identity')}")
    elif ix:
        lines.append(f"  index: {ix.get('state')}")
    if ix.get("progress"):
        lines.append(f"  indexing: {ix['progress']['done']}/{ix['progress']['total']} ({ix['progress']['phase']})")
    rb = ix.get("last_rebuild")
    if rb:
        lines.append(
            f"  last rebuild: {_clock(datetime.fromtimestamp(rb['time']).astimezone().isoformat())}: {rb['reason']}"
        )
    problems = _agent_problems(a)
    lines.append(f"  problems: {len(problems)}" if problems else "  no problems")
    lines.extend(f"    {p}" for p in problems)
    return lines


def _daemon_problems(status: StatusDocument) -> list[str]:
    d = status["daemon"]
    problems = _storage_lines(status.get("storage"))
    if d.get("config_error"):
        problems.append(f"configuration: {d['config_error']}")
    for refusal in d.get("workspaces_refused") or []:
        problems.append(f"workspace REFUSED: {refusal['agent']} at {refusal['path']}: {refusal['reason']}")
    restart = d.get("restart_needed")
    if restart:
        problems.append(f"configuration: RESTART NEEDED to apply {', '.join(restart)} (read on reload)")
    v = status.get("vectors") or {}
    if v.get("form_problem"):
        problems.append(f"vectors: {v['form_problem']}")
    return problems


def _headline(status: StatusDocument, problems: int) -> str:
    """The first line: healthy or how many problems, and the daemon in a few words."""
    d = status["daemon"]
    if d.get("starting"):
        return f"memstrata {d['version']}: daemon starting (pid {d.get('pid')}, up {duration(d.get('uptime_s', 0))})"
    health = "healthy" if not problems else f"{problems} problem{'s' if problems != 1 else ''}"
    if not d["running"]:
        seen = f"; last stopped {_clock(d['last_seen'])}" if d.get("last_seen") else ""
        return f"memstrata {d['version']}: {health}; daemon NOT running ({d['reason']}){seen}"
    agents = status.get("agents")
    counts: Mapping[str, Any] = status.get("counts") or {}
    n_agents = len(agents) if agents is not None else counts.get("agents", 0)
    n_files = sum(a.get("files", 0) for a in agents) if agents is not None else counts.get("files", 0)
    return (
        f"memstrata {d['version']}: {health}; daemon running (pid {d['pid']}, up {duration(d.get('uptime_s', 0))}), "
        f"{n_agents} agent{'s' if n_agents != 1 else ''}, {n_files:,} files"
    )


def _daemon_lines(status: StatusDocument) -> list[str]:
    """The daemon's own state: watcher, reconcile, limits, vectors (L4 comes after)."""
    d = status["daemon"]
    lines = []
    if d.get("starting"):
        lines.append(f"  {d['starting'].get('text') or d.get('summary')}")
    elif d["running"] and (d.get("age_s") or 0) > STALE_AFTER_S:
        lines.append(
            f"  (the daemon is busy: files and agents below are as of {_clock(d.get('as_of'))}, "
            f"{duration(d['age_s'])} ago; vectors, storage and conversation memory are current)"
        )
    elif not d["running"]:
        lines.append("  (the report below is read from disk and git)")
    w, r, lim = status["watcher"], status.get("reconcile") or {}, status["limits"]
    watcher = w["mode"] + (f" — {w['reason']}" if w.get("reason") else "")
    recon = f"{_clock(r.get('time'))}"
    if r.get("time") and r.get("repaired") is not None:
        recon += f" ({r['repaired']} repaired, {r.get('duration_ms')} ms)"
    lines.append(f"watcher: {watcher}; last reconcile: {recon}")
    lines.append(
        f"limits: index files up to {lim['max_file_mb']:g} MB; debounce {lim['debounce_ms']} ms; "
        f"commit after {lim['quiet_period_s']:g} s quiet (at most {lim['max_delay_s']:g} s)"
    )
    v = status.get("vectors") or {}
    if v.get("backend") == "local":
        gate = v.get("gate") or {}
        gate_text = "open" if gate.get("open") else "closed"
        lines.append(
            f"vectors: model {'loaded' if v.get('loaded') else 'not loaded'} ({Path(v['model']).name}, "
            f"{v.get('form', 'plain')} form)" + (f"; embedded {v['embedded']}" if v.get("embedded") is not None else "")
        )
        free, needed = gate.get("available_mb"), gate.get("needed_mb")
        lines.append(f"  memory gate {gate_text}: {free} MB free, {needed} MB needed")
        lines.extend(_embedding_lines(status))
        if v.get("waiting"):
            lines.append(f"  waiting: {v['waiting']}")
    elif v.get("backend"):
        lines.append(f"vectors: {v['backend']}" + (f" ({v.get('model_id')})" if v.get("model_id") else ""))
    return lines


def render(status: StatusDocument, agent: str | None = None) -> str:
    """The report a person reads: one summary line (healthy, or how many problems), the problems,
    the daemon's state, then one line per agent; ``agent``: that agent's detail instead of the list.

    Every string of the document is escaped first (daemon/common/terminal.py): a file name, a path, an
    error or a commit subject an agent wrote reaches the terminal as text, never as a control sequence.
    The overview's lines fit in :data:`WIDTH` columns (a longer one goes on, indented, on the next; only a
    path longer than that is not cut); an agent's detail keeps its lines whole."""
    text = _report(for_terminal(status), agent)
    if agent is not None:
        return text
    return "".join(part + "\n" for line in text.splitlines() for part in fitted(line))


def _report(status: StatusDocument, agent: str | None) -> str:
    """:func:`render`'s lines, as long as they come."""
    d = status["daemon"]
    agents = status.get("agents")
    if agent is not None and agents is not None:
        agents = [a for a in agents if a["id"] == agent]
    conversation, l4_problems = _conversation_lines(status.get("conversation") or {})
    sync, sync_problems = _sync_lines(status.get("sync"))
    daemon_problems = [*_daemon_problems(status), *l4_problems, *sync_problems]
    per_agent = {a["id"]: _agent_problems(a) for a in agents or []}
    count = len(daemon_problems) + sum(len(p) for p in per_agent.values())
    lines = [_headline(status, count + (0 if d["running"] else 1))]
    if count:
        lines.append("problems:")
        lines.extend(f"  {p}" for p in daemon_problems)
        for agent_id, problems in per_agent.items():
            lines.extend(f"  {agent_id}: {p}" for p in problems)
    lines.extend(_daemon_lines(status))
    lines.extend(conversation)
    lines.extend(sync)
    if d.get("starting"):
        lines.append("\nagents: shown once every workspace has been checked (the start is still running)")
        return "\n".join(lines) + "\n"
    if agents is None:  # the daemon shows per-agent details only to a token holder
        counts: Mapping[str, object] = status.get("counts") or {}
        lines.append(
            f"\n{counts.get('agents', 0)} agents, {counts.get('files', 0)} files, "
            f"{counts.get('held_back', 0)} held back; "
            "per-agent details need a token (run as root, or set $MEMSTRATA_TOKEN to an agent's token)"
        )
        return "\n".join(lines) + "\n"
    if not agents:
        lines.append("\nno agents: run `memstrata init --root DIR` or `memstrata agent add ID`")
        return "\n".join(lines) + "\n"
    lines.append("")
    if agent is not None:
        for a in agents:
            lines.extend(_agent_detail(a))
        return "\n".join(lines) + "\n"
    width = max(len(a["id"]) for a in agents)
    lines.extend(_agent_line(a, width, len(per_agent[a["id"]])) for a in agents)
    return "\n".join(lines) + "\n"
