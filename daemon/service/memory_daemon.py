"""The daemon: the parts of the service, composed, behind the face the API and the CLI call.

Where things happen (one module each): daemon/service/loop.py the main loop (signals,
turns); daemon/files/routing.py where a file event goes (path -> agent, debounce);
daemon/files/agents.py the agents watched and daemon/files/provision.py what their
workspaces get; daemon/files/reconcile.py the periodic repair; daemon/service/reload.py
SIGHUP; daemon/service/stop.py SIGTERM within its budget; daemon/service/snapshot.py the status
document; daemon/local/search.py L3 searches from API threads;
daemon/service/storage_retry.py writes a full disk refused; daemon/common/jobs.py work other
threads hand to the loop (and to the L4 store thread); daemon/conversation/broker.py L4.

Other threads never write: the watcher puts changed paths into the router's
inbox; the API reads the status snapshot, searches on read-only index
connections of its own, and hands anything that writes (reindex, repairs) to the
loop; the embedding worker writes only vectors, on its own connections.
Everything that touches the records or the indexes' chunks happens in the main
loop: one writer, no lock juggling.  Commits are the exception that proves it:
git runs on the committer's workers (daemon/files/committer.py), one job per agent,
which read the workspace and return what they did; the loop applies it to the
tracker.  While an agent's commit runs, the loop leaves that repository alone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

from daemon.api.app import ApiServer
from daemon.api.fairness import Courtesy
from daemon.api.metrics import Metrics
from daemon.common.audit import audit_log
from daemon.common.config import Config
from daemon.common.contracts import SearchAnswer, StatusDocument
from daemon.common.current import Current
from daemon.common.domain_errors import DaemonError, UnknownAgentError
from daemon.common.guard import SecretGuard
from daemon.common.jobs import Jobs
from daemon.common.settings import (
    DAEMON_HOLDER,
    OFFLINE_LOCK_WAIT_S,
    acquire_state_lock,
    decay_rules,
    guard_from,
    store_settings,
)
from daemon.common.storage import StorageHealth
from daemon.common.tokens import TokenStore
from daemon.common.workspaces import HISTORY_DIR, copies_in, history_copy_path
from daemon.conversation.broker import Broker, queue_path
from daemon.conversation.hub import HubBroker
from daemon.conversation.hub_replica import HubReplica, replica_dir
from daemon.files import recovery
from daemon.files.agents import Agents
from daemon.files.committer import Committer
from daemon.files.provision import Provisioner
from daemon.files.reconcile import Reconciler
from daemon.files.routing import Router, watch_dirs, watch_roots
from daemon.files.shared_sync import SharedCoreSync
from daemon.files.starting import StartProgress
from daemon.files.sync import Pusher
from daemon.files.tracker import AgentTracker, EditListener, make_tracker
from daemon.files.watcher import Watcher
from daemon.local.dictionary import DictionaryFile
from daemon.local.embedding import EmbedWorker, conversation_embedder, make_embedder
from daemon.local.index_files import IndexClaims
from daemon.local.indexer import Indexer
from daemon.local.search import LocalSearch
from daemon.ops.fleet_view import FleetView, NotTheHub
from daemon.service.loop import Loop, Wakeup
from daemon.service.notify import Notifier
from daemon.service.reload import Reloader
from daemon.service.snapshot import ReloadOutcome, StatusBoard
from daemon.service.started import Started
from daemon.service.stop import STOP_BUDGET_S, STOP_SHARES_S, Shutdown, StopBudget
from daemon.service.storage_retry import StorageRetry
from layers.common.ids import MAIN_AGENT
from layers.common.yamlfile import YamlFileError
from layers.conversation.adapters.store import ConversationStore, Embedder
from layers.conversation.lifecycle.durable_queue import WriteQueue
from layers.conversation.policy.registry import RegistryCache
from layers.core.bundle import SHARED_DIR
from layers.local.storage.index import ForeignFile, Identity
from layers.local.text.units import index_model_id
from protocol.operations import Search

if TYPE_CHECKING:
    from layers.daily.git.remote import Remote

__all__ = ["STOP_BUDGET_S", "STOP_SHARES_S", "DaemonError", "MemoryDaemon", "StopBudget"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class MemoryDaemon:
    """The service's parts composed; the methods the API server and the CLI's offline paths call."""

    def __init__(self, config: Config, notifier: Notifier | None = None) -> None:
        self.current = Current(config, guard_from(config))
        self.notifier = notifier or Notifier()
        self.started = time.time()
        self.embedder = make_embedder(config)
        self.identity = Identity(embed_model=index_model_id(self.embedder.model_id) if self.embedder else "")
        self.wakeup = Wakeup()
        self.jobs = Jobs(on_submit=self.wakeup.wake)  # call_in_loop: the loop runs them each turn
        self.parts = Started()  # what start() makes: the broker, the API, the watcher, the embedding worker
        self._fleet_view: FleetView | None = None  # on the hub, made by the first fleet() call
        self._fleet_made = threading.Lock()
        # commits run on its workers, never on the loop; each batch they commit refreshes the status
        self.committer = Committer(self.wakeup.wake, progress=self.wakeup.request_publish, kept=self._kept)
        self.storage = StorageHealth(on_change=self.wakeup.request_publish)
        self.indexer = Indexer(
            self.identity,
            config.paths.workspace,
            on_pending=self._wake_embedder,
            storage=self.storage,
            guard=self.current.guard_now,
            claims=IndexClaims(config.paths.state_dir),
            max_bytes=self.current.max_index_bytes,
        )
        self.tokens = TokenStore(config.paths.state_dir)
        self.audit = audit_log(config, guard=self.current.guard_now)
        self.listeners: list[EditListener] = [self.indexer]
        self.provision = Provisioner(self.current, self.tokens, self.audit, self.storage)
        self.agents = Agents(
            self.current, make_tracker, self.indexer, self.listeners, self.audit.record, self.storage, self.provision
        )
        self.indexer.know_files(desired=self.agents.desired_of, withheld=self.agents.withheld_of)
        self.reconciler = Reconciler(self.current, self.agents, self.indexer, self.storage, self.wakeup.stopping)
        self.router = Router(self.current, self.agents, self.reconciler.one, self.wakeup.wake)
        self.reconciler.heard, self.reconciler.unheard = self.router.heard, self.router.unheard
        self.storage_retry = StorageRetry(self.agents, self.provision, self.indexer, self.reconciler, self.storage)
        self.courtesy = Courtesy()  # one agent's flood makes way for the others' requests (daemon/api/fairness.py)
        self.dictionary = DictionaryFile(config.paths.state_dir)
        self.local = LocalSearch(
            self.agents.agent_of,
            self.indexer,
            self.identity,
            self.embedder,
            self.parts.vectors_blocked,
            self.jobs,
            pause=self.courtesy.pause,
            dictionary=self.dictionary,
        )
        reload_outcome = ReloadOutcome()
        self.board = StatusBoard(
            current=self.current,
            started_at=self.started,
            agents=self.agents,
            indexer=self.indexer,
            storage=self.storage,
            reconciler=self.reconciler,
            notifier=self.notifier,
            embedder=self.embedder,
            started=self.parts,
            reload_outcome=reload_outcome,
        )
        self.reloader = Reloader(
            current=self.current,
            notifier=self.notifier,
            agents=self.agents,
            reconciler=self.reconciler,
            board=self.board,
            outcome=reload_outcome,
            embedder=self.embedder,
            identity=self.identity,
            started=self.parts,
            restart_watcher=self.restart_watcher,
        )
        self.stopper = Shutdown(
            current=self.current,
            notifier=self.notifier,
            started=self.parts,
            router=self.router,
            agents=self.agents,
            committer=self.committer,
            indexer=self.indexer,
            audit=self.audit,
            board=self.board,
        )
        self.loop = Loop(
            self.wakeup,
            self.jobs,
            router=self.router,
            agents=self.agents,
            indexer=self.indexer,
            committer=self.committer,
            reconciler=self.reconciler,
            storage_retry=self.storage_retry,
            notifier=self.notifier,
            board=self.board,
            started=self.parts,
            restart_watcher=self.restart_watcher,
        )
        self._lock_file: IO[str] | None = None

    # ------------------------------------------------------------ what the parts share

    @property
    def config(self) -> Config:
        return self.current.config

    @property
    def guard(self) -> SecretGuard:
        return self.current.guard

    # the parts start() makes, as the API and the tests know them
    @property
    def broker(self) -> Broker | HubBroker | None:
        return self.parts.broker

    @broker.setter
    def broker(self, broker: Broker | HubBroker | None) -> None:
        self.parts.broker = broker

    @property
    def watcher(self) -> Watcher | None:
        return self.parts.watcher

    @property
    def api(self) -> ApiServer | None:
        return self.parts.api

    @property
    def embed_worker(self) -> EmbedWorker | None:
        return self.parts.embed_worker

    @property
    def trackers(self) -> dict[str, AgentTracker]:
        """Agent id → its tracker: the agents the daemon knows (the API checks names against it)."""
        return self.agents.trackers

    # ------------------------------------------------------------ other threads

    def on_change(self, path: str, is_directory: bool) -> None:
        """Called by the watcher thread: queue the path and wake the loop."""
        self.router.on_change(path, is_directory)

    def status(self) -> StatusDocument:
        """A snapshot the loop builds for this call, for the API thread (the last one once stopping)."""
        if self.wakeup.stop_requested:
            return self.board.read()
        return self.board.read_fresh(self.wakeup.request_publish)

    def identify(self, token: str | None) -> str | None:
        """The agent (or "admin") a caller's token belongs to; None when it belongs to nobody."""
        return self.tokens.identify(token)

    def search(self, o: Search) -> SearchAnswer:
        """Search an agent's index from an API thread (see daemon/local/search.py)."""
        return self.local.search(o)

    def fleet(self, wait_s: float) -> dict[str, Any] | None:
        """The fleet at a glance, read from the repositories under ``git.remote`` (an API thread; on the hub
        only: NotTheHub elsewhere); None while the first reading is under way and ``wait_s`` ran out."""
        with self._fleet_made:
            if self._fleet_view is None:
                config = self.config
                try:
                    hub = config.host_name
                except ValueError as exc:
                    raise NotTheHub(str(exc)) from None
                self._fleet_view = FleetView(config.git.remote, hub, config.silent_after_s)
        document = self._fleet_view.document(wait_s)
        broker = self.parts.broker
        if document is not None and isinstance(broker, Broker) and broker.feed is not None:
            spokes = broker.feed.status()["spokes"]  # each spoke's replica as of its last feed request
            for h in document.get("hosts") or []:
                h["l4_replica"] = spokes.get(h.get("host"))
        return document

    def call_in_loop(self, fn: Callable[[], T], timeout: float = 3600) -> T:
        """Run ``fn`` in the loop thread (the single writer) and return its result (API threads)."""
        return self.jobs.call(fn, timeout)

    # ------------------------------------------------------------ start-up

    def _acquire_state_lock(self, holder: str = DAEMON_HOLDER) -> None:
        wait = OFFLINE_LOCK_WAIT_S if holder == DAEMON_HOLDER else 0.0
        self._lock_file = acquire_state_lock(self.config.paths.state_dir, holder, wait_offline_s=wait)

    def start(self) -> None:
        paths = self.config.paths
        if not paths.workspace.is_dir():
            raise DaemonError(
                f"the main workspace {paths.workspace} does not exist: run `memstrata init --root DIR` "
                "or set paths.workspace in the configuration"
            )
        self._acquire_state_lock()
        unclean = recovery.begin_run(paths.state_dir)  # after a SIGKILL or a power cut: True
        recovery.clear_stale_git_locks(paths.state_dir)  # the daemon's own dead commits' index.lock
        if unclean:
            log.warning("the previous run did not stop cleanly: checking every repository before the first commit")
            recovery.clear_copy_locks(paths.state_dir / HISTORY_DIR)
        paths.agents_dir.mkdir(parents=True, exist_ok=True)
        self.provision.ensure_audit_dir()
        self.provision.ensure_admin_token()
        for agent in self.agents.discover():
            self.agents.add(agent)
        if unclean:
            for tracker in self.agents.all():
                tracker.recover_after_unclean_stop()
        parts = self.parts
        if self.config.conversation.enabled:
            parts.broker = self._make_broker()
            parts.broker.start()
        metrics = self.config.metrics
        parts.api = ApiServer(paths.socket, self, (metrics.host, metrics.port) if metrics.port else None)
        parts.api.start()
        mem0_api = self.config.conversation.mem0_api
        if parts.broker is not None and mem0_api.enabled:
            from daemon.api.app import TcpApiServer
            from daemon.api.mem0_rest import build_mem0_app

            parts.mem0_api = TcpApiServer(mem0_api.host, mem0_api.port, build_mem0_app(self))
            parts.mem0_api.start()
            log.info("mem0's REST API on http://%s:%d (API key: an agent's token)", mem0_api.host, mem0_api.port)
        if self.config.fleet.listen:
            parts.peer_api = self._make_peer_api(parts.api.metrics)
            parts.peer_api.start()
        parts.pusher = self._make_pusher()
        if parts.pusher is not None:  # every copy once: the backlog an earlier run left
            parts.pusher.start()
            parts.shared_core = self._make_shared_core(parts.pusher.remote, parts.pusher.host)
            parts.shared_core.start()
        parts.watcher = self._make_watcher()
        parts.watcher.start()
        log.info("watcher: %s%s", parts.watcher.mode, f" ({parts.watcher.reason})" if parts.watcher.reason else "")
        if self.embedder is not None:
            parts.embed_worker = EmbedWorker(
                self.embedder,
                self.identity,
                self.agents.index_paths,
                self.config.vectors.batch_size,
                on_change=self.wakeup.request_publish,
                yield_to=self.loop.has_fresh_edits,
                storage=self.storage,
            )
            parts.embed_worker.start()
        self.dictionary.ensure()  # once per state directory: a few seconds, while status says starting
        # The first check of every file: a minute on 20,000 files, while status says how far it got.
        self.board.starting = StartProgress.of(self.agents.all())
        self.reconciler.all(self.board.starting)
        self.board.publish()
        self.board.starting = None
        self.notifier.ready(self.board.line)
        log.info("ready: %s", self.board.line)

    def _make_watcher(self) -> Watcher:
        w = self.config.watch
        roots = watch_roots(self.config, [t.workspace for t in self.agents.all()])
        dirs = watch_dirs(self.config, roots)
        return Watcher(roots, self.on_change, w.mode, w.poll_interval_s, self.router.on_lost, dirs)

    def restart_watcher(self, why: str) -> None:
        log.warning("restarting the watcher: %s", why)
        assert self.parts.watcher is not None
        self.parts.watcher.stop()
        self.parts.watcher = self._make_watcher()
        self.parts.watcher.start()
        self.reconciler.all()

    def _make_peer_api(self, metrics: Metrics) -> ApiServer:
        """On the hub: the spokes' agents' L4 on ``fleet.listen`` (daemon/api/peer.py), the hosts of
        ``memstrata fleet add-host``.  Only over a store of this daemon's own (embedded or remote)."""
        from daemon.api.app import TcpApiServer
        from daemon.api.peer import build_peer_app
        from daemon.common.config import listen_address
        from daemon.ops.fleet_peers import PeerTable

        if not isinstance(self.parts.broker, Broker):
            why = "is disabled" if self.parts.broker is None else "is the hub's itself (conversation.backend: hub)"
            raise DaemonError(f"fleet.listen: the peer API serves this host's L4, which {why}")
        host, port = listen_address(self.config.fleet.listen or "")
        server = TcpApiServer(
            host, port, build_peer_app(self, PeerTable(self.config.paths.state_dir), metrics), "fleet.listen"
        )
        log.info("the peer API for the fleet's spokes on http://%s:%d (hosts: memstrata fleet add-host)", host, port)
        return server

    def _make_broker(self) -> Broker | HubBroker:
        if self.config.conversation.backend == "hub":
            try:
                broker = HubBroker(
                    self.config,
                    self.search,
                    self.audit,
                    queue=WriteQueue(queue_path(self.config)),
                    storage=self.storage,
                    guard=self.current.guard_now,
                    on_change=self.wakeup.request_publish,
                    replica=self._make_replica,
                )
            except (OSError, ValueError) as exc:
                raise DaemonError(f"conversation memory (L4) cannot start: conversation.hub: {exc}") from exc
            log.info("conversation memory: the hub's, at %s", broker.client.url)
            return broker
        embedder = conversation_embedder(self.config, self.embedder)
        self.parts.l4_embedder = embedder
        try:
            dim = embedder.dimension()
            store = ConversationStore(store_settings(self.config), embedder, dim)
            return Broker(
                self.config,
                store,
                queue=WriteQueue(queue_path(self.config)),
                registry=RegistryCache(self.config.paths.registry),
                audit=self.audit,  # the daemon's one audit log (one file, one lock)
                local_search=self.search,
                guard=self.current.guard_now,
                embedder_ready=embedder.not_ready,
                on_change=self.wakeup.request_publish,
                storage=self.storage,
                pause=self.courtesy.pause,
            )
        except (OSError, ValueError, YamlFileError) as exc:
            raise DaemonError(f"conversation memory (L4) cannot start: {exc}") from exc

    def _make_replica(self, broker: HubBroker) -> HubReplica:
        """A spoke's offline replica of what its agents may read on the hub (daemon/conversation/hub_replica.py);
        its queries embedded by this host's L4 embedder, made when a search first needs it."""

        def embedder() -> Embedder:
            return conversation_embedder(self.config, self.embedder)

        return HubReplica(
            replica_dir(self.config.paths.state_dir),
            lambda: broker.client,
            embedder,
            decay_rules(self.config),
            lambda: broker.hub_host or self.config.host_name,
            on_change=self.wakeup.request_publish,
        )

    def _make_pusher(self) -> Pusher | None:
        """The pusher of history copies to ``git.remote`` (None without one: nothing of it runs)."""
        from layers.daily.git.remote import Remote

        git = self.config.git
        if not git.remote:
            return None
        try:
            host = self.config.host_name
            remote = Remote(
                git.remote,
                key_file=self.config.config_file_path(git.remote_key_file),
                known_hosts=self.config.config_file_path(git.remote_known_hosts_file),
                host_keys=git.remote_host_keys,
                timeout_s=git.remote_timeout_s,
            )
        except ValueError as exc:
            raise DaemonError(f"git.remote: {exc}") from exc
        state = self.config.paths.state_dir
        log.info("sync: history copies to %s as host %s", remote.shown, host)
        return Pusher(
            remote,
            host,
            lambda agent_id: history_copy_path(self.config, agent_id),
            lambda: copies_in(state / HISTORY_DIR),
            state / HISTORY_DIR / ".host-report.git",
            self.audit.record,
            on_change=self.wakeup.request_publish,
            retry_cap_s=git.push_retry_max_s,
            report_interval_s=git.status_interval_s,
        )

    def _make_shared_core(self, remote: Remote, host: str) -> SharedCoreSync:
        """The shared core's side of git.remote: the hub pushes <main>/shared/, a spoke fetches it there."""
        fleet = self.config.fleet
        shared_dir = self.config.paths.workspace / SHARED_DIR
        log.info("shared core: this host is the %s (%s)", fleet.role, shared_dir)
        return SharedCoreSync(
            fleet.role,
            remote,
            host,
            shared_dir,
            self.config.paths.state_dir / HISTORY_DIR / ".shared-core.git",
            self.audit.record,
            self.current.guard_now,
            poll_s=fleet.shared_poll_s,
            retry_cap_s=self.config.git.push_retry_max_s,
            on_change=self.wakeup.request_publish,
            on_installed=lambda path: self.router.on_change(str(path), True),
            edits_dir=self.config.paths.state_dir / "shared-core-edits",
        )

    def _kept(self, agent_id: str) -> None:
        """(loop thread) an agent's history copy moved: the pusher, when there is one, pushes it; a
        commit of the main workspace may be one of shared/ (the hub pushes it; a spoke undoes it)."""
        if self.parts.pusher is not None:
            self.parts.pusher.kept(agent_id)
        if self.parts.shared_core is not None and agent_id == MAIN_AGENT:
            self.parts.shared_core.changed()

    def _wake_embedder(self) -> None:
        if self.parts.embed_worker is not None:
            self.parts.embed_worker.wake()

    # ------------------------------------------------------------ run, reload, stop

    def run(self) -> int:
        try:
            self.loop.run(self.start, self.reload, self.shutdown)
            if self.stopper.left_running:  # `memstrata run` exits without the interpreter's teardown
                log.warning("exiting with %s still running", ", ".join(self.stopper.left_running))
            return 0
        finally:
            self.release()

    def reload(self) -> None:
        """SIGHUP: re-read the configuration; a bad file keeps the running one (daemon/service/reload.py)."""
        self.reloader.reload()

    def shutdown(self) -> None:
        """Stop within STOP_BUDGET_S (daemon/service/stop.py)."""
        self.stopper.run()

    def release(self) -> None:
        self.committer.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # ------------------------------------------------------------ offline mode, reindex

    def offline_prepare(self) -> None:
        """Trackers without watching or serving, for `memstrata reindex` while the daemon is down.

        The state lock keeps a daemon from starting meanwhile; records stay in
        memory, so the next daemon start still sees (and commits) every change.
        """
        self._acquire_state_lock("memstrata reindex")
        for agent in self.agents.discover():
            self.agents.add_offline(agent)

    def reindex(self, agent_id: str | None, rebuild: bool = False) -> dict[str, Any]:
        """Full reindex (loop thread): the incremental code over every file, or a fresh rebuild."""
        trackers = self.agents.trackers
        if agent_id and agent_id not in trackers:
            raise UnknownAgentError(f"unknown agent {agent_id!r}")
        chosen = [trackers[agent_id]] if agent_id else list(trackers.values())
        if MAIN_AGENT in trackers:
            trackers[MAIN_AGENT].refresh()  # the shared core every index holds
        out: dict[str, dict[str, Any]] = {}
        for tracker in chosen:
            if tracker.id != MAIN_AGENT:  # main was refreshed just above
                tracker.refresh()
            desired = self.agents.desired(tracker)
            if rebuild:
                with contextlib.suppress(ForeignFile):  # refused: reported below, the other agents go on
                    stats = self.indexer.rebuild(
                        tracker.agent, desired, reason="requested by memstrata reindex --rebuild"
                    )
                    out[tracker.id] = {"files": stats["files"], "chunks": stats["chunks"], "rebuilt": True}
            else:
                changed = self.indexer.open(tracker.agent, desired)
                out[tracker.id] = {"files": len(desired), "changed": changed, "rebuilt": False}
            refused = self.indexer.refused(tracker.id)
            if refused:
                out[tracker.id] = {"files": len(desired), "error": refused}
        self.board.publish()
        return out
