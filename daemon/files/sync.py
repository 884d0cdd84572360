"""The pusher: each agent's history copy to the central remote (``git.remote``), on a thread of its own.

A commit never waits for the network: the committer's workers store each commit in the agent's
history copy (layers/daily/git/history_copy.py) and the loop tells the pusher (:meth:`Pusher.kept`),
which pushes that copy when it gets to it; several commits meanwhile are one push.  The copy *is*
the backlog: everything is in it before the workspace shows it, and what the remote acknowledged is
written down there (``refs/pushed/``, layers/daily/git/remote.py), so a backlog survives a restart
and is pushed at the next start, when every agent's copy is pushed once.

While the remote cannot be reached, attempts wait the daemon's back-off (daemon/common/backoff.py,
capped by ``git.push_retry_max_s``); commits go on and status says how far behind each agent is.
A ref the remote refuses (its ref moved: someone rewrote it there) is never forced: it is said in
status, the log (a warning) and the audit log, and not offered again until the copy's refs move
(the agent commits again) or the daemon restarts.  A ref the remote had moved back behind what it
acknowledged (or lost) is taken forward again by the push, fast-forward, and that is said in the
same three places (``sync_rewound``): nothing the remote acknowledged goes missing without a trace.

With each round that moved something, and every ``git.status_interval_s`` while idle, the host
reports itself (layers/daily/git/host_report.py): ``refs/memstrata/<host>/status``, a small commit
of ``status.json`` that the hub's fleet view reads.

Only this thread writes the state below; status readers take a copy under the lock.  The pusher
holds no lock the loop or the watcher needs, and reads the copies through git only.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from daemon import __version__
from daemon.common.backoff import backoff
from daemon.common.contracts import SyncAgent, SyncRefused, SyncRewound, SyncStatus
from daemon.files.network_thread import NetworkThread
from daemon.files.reconcile import iso
from layers.daily.git import host_report
from layers.daily.git import remote as fleet
from layers.daily.git.history_copy import HistoryCopy
from layers.daily.git.run import Cancelled, GitFailed

log = logging.getLogger(__name__)

FIRST_RETRY_S = 2.0  # the back-off's first wait after a failed attempt
POLL_S = 30.0  # every copy's refs looked at this often anyway (a history check that moved them, say)


@dataclass
class _Agent:
    """What the pusher knows of one agent (its thread's only)."""

    id: str
    copy: HistoryCopy
    acked: tuple[tuple[str, str], ...] | None = None  # the copy's refs when the remote last took them all
    refused_at: tuple[tuple[str, str], ...] | None = None  # the copy's refs when something was refused
    counted: tuple[tuple[str, str], ...] | None = None  # the refs ``behind`` was counted for
    behind: fleet.Behind = field(default_factory=lambda: fleet.Behind(0, None, None, 0))
    remote_ref: str = ""
    pushed_at: float | None = None
    refused: list[SyncRefused] = field(default_factory=list)
    rewound: dict[str, SyncRewound] = field(default_factory=dict)  # by remote ref


class Pusher(NetworkThread):
    """Pushes history copies to ``remote`` as host ``host`` (see the module docstring)."""

    def __init__(
        self,
        remote: fleet.Remote,
        host: str,
        copy_path: Callable[[str], Path],
        agents_of: Callable[[], Iterable[str]],
        report_mirror: Path,
        audit: Callable[..., None],
        on_change: Callable[[], None] = lambda: None,
        retry_cap_s: float = 300.0,
        report_interval_s: float = 300.0,
    ) -> None:
        self.remote = remote
        self.host = fleet.check_name(host, "host")
        self._copy_path = copy_path
        self._agents_of = agents_of  # every agent with a history copy here (read by this thread)
        self._report_mirror = report_mirror
        self._audit = audit
        self._on_change = on_change
        self._retry_cap_s = retry_cap_s
        self._report_interval_s = report_interval_s
        super().__init__()
        self._agents: dict[str, _Agent] = {}
        self._wanted: set[str] = set()  # told by the loop: these copies moved
        self._lock = threading.Lock()  # _wanted and the status fields below
        self._failures = 0
        self._retry_at: float | None = None  # monotonic
        self._reachable: bool | None = None
        self._last_error: str | None = None
        self._failing_since: float | None = None
        self._last_contact: float | None = None
        self._report: dict[str, object] = {"pushed_at": None, "error": None}
        self._report_due = 0.0  # monotonic: the first round reports
        self._view: list[SyncAgent] = []

    # ------------------------------------------------------------ other threads

    def start(self) -> None:
        """Push every agent's copy once (the backlog of earlier runs), then follow the loop's word."""
        self._begin(self._run, "pusher")
        self._wake.set()

    def kept(self, agent_id: str) -> None:
        """The loop's word: ``agent_id``'s copy moved (its commits are in it); push it soon."""
        with self._lock:
            self._wanted.add(agent_id)
        self._wake.set()

    def status(self) -> SyncStatus:
        with self._lock:
            retry = None if self._retry_at is None else round(max(0.0, self._retry_at - time.monotonic()), 1)
            return {
                "host": self.host,
                "remote": self.remote.shown,
                "reachable": self._reachable,
                "last_error": self._last_error,
                "failing_since": iso(self._failing_since),
                "last_contact": iso(self._last_contact),
                "retry_in_s": retry,
                "report": dict(self._report),
                "agents": [dict(a) for a in self._view],  # type: ignore[misc]
            }

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        next_poll = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            # while failing, the next attempt (the report waits for it too); else the report's turn
            waits = [next_poll - now, (self._retry_at if self._retry_at is not None else self._report_due) - now]
            self._wake.wait(max(0.0, min(waits)))
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            with self._lock:
                wanted, self._wanted = self._wanted, set()
            try:  # nothing here may end the thread: a host that stops pushing goes SILENT on the hub
                if now >= next_poll:  # agents restored or added meanwhile; copies a history check moved
                    next_poll = now + POLL_S
                    wanted.update(self._agents_of())
                for agent_id in wanted:
                    self._agent(agent_id)
                self._round(now)
            except Cancelled:
                return
            except Exception:  # a bug, or git failing locally: said, and tried again after the back-off
                log.exception("sync: the push round failed")
                self._failed("the push round failed (see the log)", now)
            self._on_change()

    def _agent(self, agent_id: str) -> _Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = _Agent(agent_id, HistoryCopy(self._copy_path(agent_id), self.cancel))
        return agent

    def _round(self, now: float) -> None:
        """Count what each copy owes; push those that owe something, unless waiting out a failure."""
        owing = []
        for agent in self._agents.values():
            refs = _refs(agent.copy)
            if refs != agent.counted:
                self._count(agent, refs)
            if refs and refs != agent.acked and refs != agent.refused_at:
                owing.append((agent, refs))
        self._publish_view()
        if self._retry_at is not None and now < self._retry_at:
            return
        moved = False
        for agent, refs in owing:
            try:
                done = fleet.push(agent.copy, self.remote, self.host, agent.id)
            except fleet.Unreachable as exc:
                self._failed(exc.reason, now)
                return
            except GitFailed as exc:  # the copy itself (a repack under way, a disk error): later
                self._failed(f"{agent.id}: {exc}", now)
                return
            self._reached()
            moved |= bool(done.moved)
            agent.pushed_at = time.time() if done.updates else agent.pushed_at
            self._refusals(agent, refs, done)
            self._rewinds(agent, done)
            self._count(agent, refs)
        self._publish_view()
        if moved or time.monotonic() >= self._report_due:
            self._push_report()

    def _count(self, agent: _Agent, refs: tuple[tuple[str, str], ...]) -> None:
        agent.behind = fleet.behind(agent.copy, self.host, agent.id)
        agent.remote_ref = fleet.daemon_ref_on_remote(agent.copy, self.host, agent.id)
        agent.counted = refs

    def _refusals(self, agent: _Agent, refs: tuple[tuple[str, str], ...], done: fleet.Pushed) -> None:
        if done.ok:
            agent.acked, agent.refused_at, agent.refused = refs, None, []
            return
        agent.refused_at = refs
        before = {r["remote_ref"]: r for r in agent.refused}
        agent.refused = []
        for update in done.refused:
            old = before.get(update.remote)
            since = old["since"] if old is not None else iso(time.time()) or ""
            agent.refused.append(
                {
                    "ref": update.local,
                    "remote_ref": update.remote,
                    "sha": update.sha,
                    "reason": update.reason,
                    "since": since,
                }
            )
            if old is None or old["sha"] != update.sha:
                self._said(
                    "sync_refused",
                    "sync: %s: the remote refused %s -> %s (%s): its ref moved; kept back, never forced",
                    (agent.id, update.local, update.remote, update.reason),
                    agent=agent.id,
                    ref=update.local,
                    remote_ref=update.remote,
                    sha=update.sha,
                    reason=update.reason,
                    rewritten_here=update.rewritten_here,
                )

    def _rewinds(self, agent: _Agent, done: fleet.Pushed) -> None:
        for update in done.rewound:
            self._said(
                "sync_rewound",
                "sync: %s: the remote held %s at %s, behind the %s it had acknowledged: pushed forward to %s again",
                (agent.id, update.remote, update.found or "no ref", update.rewound_from, update.sha),
                agent=agent.id,
                remote_ref=update.remote,
                acknowledged=update.rewound_from,
                found=update.found,
                sha=update.sha,
            )
            agent.rewound[update.remote] = {
                "remote_ref": update.remote,
                "acknowledged": update.rewound_from,
                "found": update.found,
                "sha": update.sha,
                "at": iso(time.time()) or "",
            }

    def _said(self, event: str, message: str, args: tuple[object, ...], **fields: object) -> None:
        """A warning in the log and a line in the audit log, for one event of one ref."""
        log.warning(message, *args, extra={"event": event})
        self._audit(event, host=self.host, remote=self.remote.shown, **fields)

    def _push_report(self) -> None:
        self._report_due = time.monotonic() + self._report_interval_s
        content = json.dumps(self._report_document(), indent=1, sort_keys=True).encode() + b"\n"
        try:
            update = host_report.push_report(self.remote, self._report_mirror, self.host, content, self.cancel)
        except fleet.Unreachable as exc:
            self._failed(exc.reason, time.monotonic())
            return
        except GitFailed as exc:
            with self._lock:
                self._report["error"] = str(exc)
            return
        with self._lock:
            if update.status == "refused":
                if self._report.get("error") is None:
                    log.warning(
                        "sync: the remote refused this host's report %s (%s): another host under the name %r?",
                        update.remote,
                        update.reason,
                        self.host,
                    )
                    self._audit("sync_refused", host=self.host, remote_ref=update.remote, reason=update.reason)
                self._report["error"] = f"refused ({update.reason}): another host may use the name {self.host!r}"
            else:
                self._report = {"pushed_at": iso(time.time()), "error": None, "commit": update.sha}

    def _report_document(self) -> dict[str, object]:
        agents = {}
        for agent in self._agents.values():
            agents[agent.id] = {
                "last_pushed": agent.behind.last_pushed,
                "head": agent.behind.head,
                "behind_commits": agent.behind.commits,
                "behind_lost": agent.behind.lost,
                "remote_ref": agent.remote_ref,
                "refused": len(agent.refused),
            }
        return {"host": self.host, "version": __version__, "time": iso(time.time()), "agents": agents}

    def _publish_view(self) -> None:
        view: list[SyncAgent] = [
            {
                "id": a.id,
                "behind_commits": a.behind.commits,
                "behind_lost": a.behind.lost,
                "remote_ref": a.remote_ref,
                "last_pushed": a.behind.last_pushed,
                "pushed_at": iso(a.pushed_at),
                "refused": list(a.refused),
                "rewound": list(a.rewound.values()),
            }
            for a in sorted(self._agents.values(), key=lambda a: a.id)
        ]
        with self._lock:
            self._view = view

    def _failed(self, reason: str, now: float) -> None:
        self._failures += 1
        wait = backoff(self._failures, FIRST_RETRY_S, self._retry_cap_s)
        with self._lock:
            first = self._reachable is not False
            self._reachable = False
            self._last_error = reason
            if self._failing_since is None:
                self._failing_since = time.time()
            self._retry_at = now + wait
        if first:
            log.warning(
                "sync: the remote %s cannot be reached: %s (the copies keep the backlog)", self.remote.shown, reason
            )

    def _reached(self) -> None:
        with self._lock:
            if self._reachable is False:
                log.info("sync: the remote %s answers again", self.remote.shown)
            self._reachable = True
            self._last_error = None
            self._failing_since = None
            self._retry_at = None
            self._last_contact = time.time()
        self._failures = 0


def _refs(copy: HistoryCopy) -> tuple[tuple[str, str], ...]:
    """The copy's daemon and lost refs (what a push offers), as one comparable value."""
    return tuple(sorted(fleet.local_refs(copy).items()))
