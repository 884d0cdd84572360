"""``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz``: the daemon as a scraper sees it.

The figures come from the status document the loop publishes (the same one ``memstrata status``
shows), cut to what the caller may see (daemon/api/app.py ``scoped_status``): per-agent series
for the administrator, an agent's own for its token, daemon-level ones for anyone else. Nothing
here is a path, a file name or a memory's text: agent ids, counts, states and durations only.

Latencies (search, L4 search, L4 add) are histograms observed around the route's work.

``prometheus-client`` builds the text: imported by the daemon only, where it costs ~15 ms and
~1.4 MB (measured after the web stack is loaded; bench and figures in docs/observability.md). The
CLI never imports this module: standalone the import is ~60-120 ms and ~12 MB.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from daemon.common.contracts import StatusDocument

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds: a search answers in milliseconds, a cold model or a slow store takes seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
T = TypeVar("T")


def readiness(status: StatusDocument) -> tuple[bool, list[str]]:
    """Ready: every agent's workspace checked at start (the reconcile done) and the L4 store open
    (or L4 disabled). A remote store that is merely unreachable keeps the daemon ready: searches
    are answered from L3, marked degraded, and the queue keeps writes."""
    reasons = []
    daemon = status.get("daemon") or {}
    if not daemon.get("running"):
        reasons.append("the daemon is not running")
    if daemon.get("starting"):
        reasons.append("starting: " + str(daemon.get("summary") or "checking the workspaces"))
    conversation = status.get("conversation") or {}
    if conversation.get("enabled") and conversation.get("error"):
        reasons.append(f"conversation store not open: {conversation['error']}")
    return not reasons, reasons


def _one(name: str, doc: str, value: float) -> GaugeMetricFamily:
    """A gauge without labels, at ``value``."""
    return GaugeMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _per_agent_counter(name: str, doc: str) -> CounterMetricFamily:
    """A counter (``name_total``) read from the document: it starts again at 0 when the daemon restarts."""
    return CounterMetricFamily(name, doc, labels=["agent"])


class StatusCollector(Collector):
    """Series read from the status document of the moment (set before each scrape)."""

    def __init__(self) -> None:
        self.document: StatusDocument = {}
        self.fleet: Mapping[str, Any] | None = None  # on the hub, for the administrator: status --fleet's document

    def collect(self) -> Iterator[Metric]:
        d: Mapping[str, Any] = self.document
        daemon: Mapping[str, Any] = d.get("daemon") or {}
        info = InfoMetricFamily("memstrata", "memstrata's version")
        info.add_metric([], {"version": str(daemon.get("version", ""))})
        yield info
        ready, _ = readiness(self.document)
        yield _one("memstrata_ready", "1 when /readyz answers 200", int(ready))
        yield _one("memstrata_uptime_seconds", "Since the daemon started", daemon.get("uptime_s", 0))
        counts: Mapping[str, Any] = d.get("counts") or {}
        for key, doc in (
            ("agents", "Agents the daemon serves"),
            ("files", "Memory files across every agent"),
            ("held_back", "Files held back from git (a never_store pattern matched)"),
            ("pending_commits", "Agents with changes waiting to be committed"),
            ("agents_with_errors", "Agents whose last commit or index reports an error"),
        ):
            yield GaugeMetricFamily(f"memstrata_{key}", doc, value=counts.get(key, 0))
        yield from self._agents(d.get("agents"))
        yield from self._vectors(d.get("vectors") or {})
        yield from self._conversation(d.get("conversation") or {})
        yield from self._sync(d.get("sync"))
        yield from self._fleet(self.fleet)
        storage = _gauge("memstrata_storage_failing", "Writes failing by place (a full or read-only disk)", ("place",))
        failing: dict[str, int] = {}
        for problem in (d.get("storage") or {}).get("problems") or []:
            failing[str(problem.get("place"))] = failing.get(str(problem.get("place")), 0) + 1
        for place, n in sorted(failing.items()):
            storage.add_metric([place], n)
        yield storage

    def _agents(self, agents: list[Mapping[str, Any]] | None) -> Iterator[Metric]:
        if agents is None:  # not the caller's to see
            return
        families = {
            "files": _gauge("memstrata_agent_files", "Memory files of the agent", ("agent",)),
            "pending": _gauge("memstrata_agent_pending_edits", "1 when edits wait to be committed", ("agent",)),
            "held": _gauge("memstrata_agent_held_back_files", "Files held back from git", ("agent",)),
            "failing": _gauge("memstrata_agent_commits_failing", "1 while the agent's commits fail", ("agent",)),
            "chunks": _gauge("memstrata_index_chunks", "Chunks in the agent's L3 index", ("agent",)),
            "vectors": _gauge("memstrata_index_vectors", "Chunks with their vector", ("agent",)),
            "pending_vectors": _gauge("memstrata_index_pending_vectors", "Chunks waiting for a vector", ("agent",)),
            "index_ok": _gauge("memstrata_index_ready", "1 when the agent's index is ready", ("agent",)),
        }
        commits = _per_agent_counter("memstrata_commits", "Commits made since the daemon started")
        failures = _per_agent_counter("memstrata_commit_failures", "Failed commit attempts since the start")
        for a in agents:
            agent = [str(a.get("id"))]
            ix: Mapping[str, Any] = a.get("index") or {}
            families["files"].add_metric(agent, a.get("files", 0))
            families["pending"].add_metric(agent, int(bool(a.get("pending_commit"))))
            families["held"].add_metric(agent, len({h.get("path") for h in a.get("held_back") or []}))
            families["failing"].add_metric(agent, int(bool(a.get("commits_failing"))))
            families["chunks"].add_metric(agent, ix.get("chunks", 0))
            families["vectors"].add_metric(agent, ix.get("vectors", 0))
            families["pending_vectors"].add_metric(agent, ix.get("pending_embeddings", 0))
            families["index_ok"].add_metric(agent, int(ix.get("state") == "ready"))
            commits.add_metric(agent, a.get("commits_total", 0))
            failures.add_metric(agent, a.get("commit_failures_total", 0))
        yield from families.values()
        yield commits
        yield failures

    def _vectors(self, v: Mapping[str, Any]) -> Iterator[Metric]:
        yield _one("memstrata_model_loaded", "1 while the local model is in memory", int(bool(v.get("loaded"))))
        gate = v.get("gate") or {}
        yield _one("memstrata_memory_gate_open", "1 when free memory allows the model", int(bool(gate.get("open"))))
        yield _one("memstrata_model_loads", "Times the model was loaded since the start", v.get("loads") or 0)

    def _conversation(self, c: Mapping[str, Any]) -> Iterator[Metric]:
        if not c.get("enabled"):
            return
        queue: Mapping[str, Any] = c.get("queue") or {}
        breaker: Mapping[str, Any] = c.get("breaker") or {}
        yield _one("memstrata_l4_reachable", "1 when the L4 store answers", int(bool(c.get("reachable"))))
        state = _gauge("memstrata_l4_breaker_state", "The L4 breaker: 1 for its current state", ("state",))
        current = breaker.get("state") or ("closed" if c.get("reachable") else "open")
        for name in ("closed", "open", "half-open"):
            state.add_metric([name], int(current == name))
        yield state
        for key, name, doc in (
            ("depth", "memstrata_l4_queue_depth", "L4 writes queued while the store was down"),
            ("set_aside", "memstrata_l4_queue_set_aside", "Queued writes the store refuses (kept in the queue)"),
            ("replay_rate_per_s", "memstrata_l4_replay_rate", "Queued writes replayed per second (recent)"),
            ("replayed", "memstrata_l4_replayed", "Queued writes replayed since the start"),
            (
                "unflushed",
                "memstrata_l4_unflushed",
                "Answered L4 writes the write-ahead log holds until the store's flush",
            ),
        ):
            yield _one(name, doc, queue.get(key) or 0)
        replica: Mapping[str, Any] | None = c.get("replica")  # a spoke's replica of the hub (hub_replica.py)
        if replica:
            if replica.get("lag") is not None:
                yield _one(
                    "memstrata_l4_replica_lag", "Changes of the hub's feed the replica has not applied", replica["lag"]
                )
            if replica.get("age_s") is not None:
                yield _one(
                    "memstrata_l4_replica_age_seconds", "Since the replica last heard the hub's feed", replica["age_s"]
                )
        feed: Mapping[str, Any] | None = c.get("feed")  # the hub's change feed for its spokes
        if feed:
            yield _one("memstrata_l4_feed_seq", "The hub's change feed: its settled sequence", feed.get("seq") or 0)
            lag = _gauge(
                "memstrata_l4_spoke_replica_lag", "A spoke's replica behind the feed (its last request)", ("host",)
            )
            for host, spoke in (feed.get("spokes") or {}).items():
                lag.add_metric([str(host)], spoke.get("lag") or 0)
            yield lag

    def _sync(self, s: Mapping[str, Any] | None) -> Iterator[Metric]:
        """git.remote: whether it answers, and per agent how far behind it is (none without a remote)."""
        if not s:
            return
        yield _one(
            "memstrata_sync_reachable", "1 when the git remote answered the last push", int(bool(s.get("reachable")))
        )
        behind = _gauge(
            "memstrata_sync_behind_commits", "Commits of the agent's history the remote has not got", ("agent",)
        )
        lost = _gauge("memstrata_sync_behind_lost", "Lost histories (refs/lost/) not on the remote yet", ("agent",))
        refused = _gauge(
            "memstrata_sync_refused_refs", "Refs the remote refused (its ref moved), kept back", ("agent",)
        )
        pushed = _gauge(
            "memstrata_sync_last_push_timestamp_seconds", "When the remote last acknowledged a push", ("agent",)
        )
        for a in s.get("agents") or []:
            agent = [str(a.get("id"))]
            behind.add_metric(agent, a.get("behind_commits", 0))
            lost.add_metric(agent, a.get("behind_lost", 0))
            refused.add_metric(agent, len(a.get("refused") or []))
            if a.get("pushed_at"):
                pushed.add_metric(agent, datetime.fromisoformat(a["pushed_at"]).timestamp())
        yield from (behind, lost, refused, pushed)
        yield from self._shared(s.get("shared_core"))

    def _shared(self, c: Mapping[str, Any] | None) -> Iterator[Metric]:
        """The shared core: how old this host's commit is, whether the remote answers, local edits undone."""
        if not c:
            return
        yield _one(
            "memstrata_shared_core_reachable",
            "1 when the remote answered the last fetch or push of the shared core",
            int(bool(c.get("reachable"))),
        )
        if c.get("age_s") is not None:
            yield _one(
                "memstrata_shared_core_age_seconds",
                "Age of the shared core's commit this host holds (spoke) or pushed (hub)",
                c["age_s"],
            )
        last = c.get("last_fetch") or c.get("last_push")
        if last:
            yield _one(
                "memstrata_shared_core_last_sync_timestamp_seconds",
                "When the remote last answered a fetch (spoke) or took a push (hub)",
                datetime.fromisoformat(last).timestamp(),
            )
        edit = c.get("local_edit")
        yield _one(
            "memstrata_shared_core_local_edits",
            "Edits of shared/ on this spoke, not propagated (the hub's copy written back)",
            edit["count"] if edit else 0,
        )
        yield _one(
            "memstrata_shared_core_refused",
            "1 while the remote refuses the hub's push of the shared core",
            int(bool(c.get("refused"))),
        )

    def _fleet(self, f: Mapping[str, Any] | None) -> Iterator[Metric]:
        """On the hub, every host of the fleet as its last report and the hub's reflog say
        (daemon/ops/fleet_view.py); nothing elsewhere, nor before the first reading."""
        if not f:
            return
        yield _one("memstrata_fleet_hosts", "Hosts of the fleet the hub knows (a repository each)", len(f["hosts"]))
        yield _one("memstrata_fleet_hosts_left_out", "Hosts past the cap, not read", f.get("hosts_left_out") or 0)
        heard = _gauge(
            "memstrata_fleet_host_last_heard_seconds", "Since the hub received the host's last report", ("host",)
        )
        silent = _gauge(
            "memstrata_fleet_host_silent", "1 when the host was not heard from within fleet.silent_after_s", ("host",)
        )
        never = _gauge("memstrata_fleet_host_never_heard", "1 for a host authorized but never heard from", ("host",))
        unreadable = _gauge(
            "memstrata_fleet_host_report_unreadable", "1 when the host's report is unreadable", ("host",)
        )
        info = InfoMetricFamily("memstrata_fleet_host", "The memstrata version the host reports", labels=["host"])
        behind = _gauge(
            "memstrata_fleet_agent_behind_commits", "Commits the agent's host has not pushed yet", ("host", "agent")
        )
        refused = _gauge(
            "memstrata_fleet_agent_refused_refs", "Refs of the agent the hub refused (kept back)", ("host", "agent")
        )
        pushed = _gauge(
            "memstrata_fleet_agent_last_push_timestamp_seconds",
            "When the hub received the agent's last pushed commit",
            ("host", "agent"),
        )
        for h in f["hosts"]:
            host = str(h["host"])
            if h.get("heard_ago_s") is not None:
                heard.add_metric([host], h["heard_ago_s"])
            silent.add_metric([host], int(bool(h.get("silent"))))
            never.add_metric([host], int(h.get("state") == "never_heard"))
            unreadable.add_metric([host], int(bool(h.get("error"))))
            if h.get("version") is not None:
                info.add_metric([host], {"version": str(h["version"])})
            for a in h.get("agents") or []:
                labels = [host, str(a["id"])]
                if a.get("behind_commits") is not None:
                    behind.add_metric(labels, a["behind_commits"])
                if a.get("refused") is not None:
                    refused.add_metric(labels, a["refused"])
                if a.get("pushed_at"):
                    pushed.add_metric(labels, datetime.fromisoformat(a["pushed_at"]).timestamp())
        yield from (heard, silent, never, unreadable, info, behind, refused, pushed)


class Metrics:
    """The daemon's registry: the status series, the latency histograms and the process's own
    (RSS, CPU, open files: prometheus-client's process collector)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._scrape = threading.Lock()  # one view of the status at a time: scrapes of two callers never mix
        self.status = StatusCollector()
        self.registry.register(self.status)
        ProcessCollector(namespace="memstrata", registry=self.registry)
        self.latency = Histogram(
            "memstrata_request_duration_seconds",
            "Time to answer a request, by route (the work only, after the gate)",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def timed(self, route: str, work: Callable[..., T]) -> Callable[..., T]:
        """``work`` with its duration observed (failures too: a slow refusal is slow for the caller)."""
        histogram = self.latency.labels(route=route)

        @functools.wraps(work)
        def timed_work(*args: Any, **kwargs: Any) -> T:
            started = time.perf_counter()
            try:
                return work(*args, **kwargs)
            finally:
                histogram.observe(time.perf_counter() - started)

        return timed_work

    def exposition(self, document: StatusDocument, fleet: Mapping[str, Any] | None = None) -> bytes:
        """The text a scrape gets, for this view of the status (and, on the hub, of the fleet)."""
        with self._scrape:
            self.status.document = document
            self.status.fleet = fleet
            return generate_latest(self.registry)
