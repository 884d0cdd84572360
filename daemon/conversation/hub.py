"""A spoke's L4 is the hub's (``conversation.backend: hub``, issue 48): the broker that asks the hub.

In place of daemon/conversation/broker.py's ``Broker``, with the methods the API app and mem0's REST
API call.  Each operation goes to the hub's peer API (daemon/api/peer.py) as the calling agent
(``X-Memstrata-Agent``: its local id) with this host's key; the hub acts as ``HOST/AGENT`` and applies
every rule there, and its answer (status and JSON) is passed on unchanged, so the CLI, the skill,
MCP and mem0's REST surface work the same on a spoke.  Answers that name an owner name ``HOST/AGENT``.

The hub unreachable (refused, reset, timed out, a 502/503/504, or the prober saw it away): an add is
kept in the spoke's durable queue, synced, and answered ``queued`` as the broker answers a queued add;
the hub's replayer (daemon/conversation/hub_queue.py) sends it once the hub answers, exactly once by
its write_id (one is made before the first send when the caller gave none, so an answer lost on the
link is never a second memory).  While anything is queued, adds queue behind it: their order is kept.
A search, a get and a listing are answered from this host's replica of what its agents may read on the hub
(hub_replica.py: the hub's answer shape and ranking, ``degraded: true``, the reason and ``replica_age_s``);
without a usable replica a search is answered from the caller's own L3 index, exactly as the broker answers with its
store down (reads.py's ``l3_fallback``), and a get or a listing is 503.  A history is 503 saying that it needs
the hub: the replica holds each memory as it is now, not its events.  Every other operation (update, delete,
restore, a superseding add) is 503 saying nothing was changed: they need the hub's memories as they are now.
A prober asks the hub's health every ``conversation.probe_interval_s``, so that status says whether it is
there and the replay starts when it is back.  Maintenance (cleanup, consolidation, backup, restore) is the
hub's: here it answers 409 saying so.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import apsw

from daemon.common.audit import AuditLog
from daemon.common.config import Config
from daemon.common.contracts import HubConversationStatus, QueueStatus, SearchAnswer
from daemon.common.domain_errors import (
    ConflictError,
    ConversationUnavailableError,
    HubAnswerError,
    NotStoredError,
)
from daemon.common.guard import SecretGuard
from daemon.common.storage import StorageHealth, is_storage_error
from daemon.conversation.hub_client import HEALTH_PATH, HubAnswer, HubClient, HubUnreachable, read_key
from daemon.conversation.hub_queue import AWAY, HubReplayer, entry, hub_message
from daemon.conversation.hub_replica import HubReplica
from daemon.conversation.queue import QueueAccess
from daemon.conversation.reads import audit_denied, l3_fallback
from daemon.conversation.writes import refuse_secrets
from daemon.ops.consolidation import ConsolidateOptions
from layers.conversation.lifecycle.durable_queue import WriteQueue
from layers.conversation.policy.metadata import strings
from layers.conversation.policy.rules import DEFAULT_TYPE
from protocol.operations import (
    Add,
    Cleanup,
    Delete,
    DeleteAll,
    Get,
    History,
    List,
    MemorySearch,
    Operation,
    RestoreMemory,
    Search,
    Update,
)

log = logging.getLogger(__name__)

NOT_CHANGED = "nothing was changed and nothing was queued (only adds are queued for the hub): try again once it is back"
HISTORY_NEEDS_HUB = (
    "a memory's history is the hub's record of its events (each add, update and delete), and this host's replica "
    "keeps only each memory as it is now: try again once the hub is back (get, list and search answer from the "
    "replica meanwhile, once this host has one)"
)
RUN_ON_THE_HUB = "run it on the hub: the fleet's L4 is the hub's (conversation.backend: hub)"


def hub_client(config: Config) -> HubClient:
    """The hub of ``conversation.hub``, its key read now; OSError/ValueError naming the file, never the key."""
    hub = config.conversation.hub
    if hub is None:
        raise ValueError("conversation.backend hub needs conversation.hub: {url, key_file}")
    key_file = config.config_file_path(hub.key_file)
    assert key_file is not None
    return HubClient(hub.url, read_key(key_file), hub.timeout_s)


class _Writes:
    """What mem0's REST API reads of the broker's writes: whether an add infers by default (the hub's LLM)."""

    llm_configured = False


class HubBroker:
    """L4 through the hub; what status shows of it."""

    def __init__(
        self,
        config: Config,
        local_search: Callable[[Search], SearchAnswer],  # the L3 fallback: the spoke's own index
        audit: AuditLog,
        queue: WriteQueue,  # the spoke's durable queue (broker.py's queue_path): adds while the hub is away
        storage: StorageHealth,
        guard: Callable[[], SecretGuard],  # never_store, checked before an add is queued (the hub checks again)
        on_change: Callable[[], None] = lambda: None,
        replica: Callable[[HubBroker], HubReplica] | None = None,  # the offline replica (None: none kept)
    ) -> None:
        self.config = config
        self.guard = guard
        self.client = hub_client(config)  # may raise: the daemon says conversation memory cannot start
        self.storage = storage
        self.queue = QueueAccess(queue, storage)
        self.queue.open()  # a full disk at start: tried again by the replayer, said in status
        self.local_search = local_search
        self.audit = audit  # the API's impersonation refusals are written here, as with the broker
        self.on_change = on_change
        self.writes = _Writes()
        self.reachable: bool | None = None  # None: not asked yet
        self.last_error: str | None = None
        self.last_contact: str | None = None
        self.down_since: float | None = None
        self.rtt_ms: float | None = None
        self.hub_host: str | None = None  # what the hub calls this host
        self._stopping = threading.Event()
        self._prober: threading.Thread | None = None
        self.replayer = HubReplayer(
            self.queue, self._send, audit, on_change, lambda: self.config.conversation.probe_interval_s
        )
        self.replica = replica(self) if replica is not None else None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._prober = threading.Thread(target=self._probe_loop, name="hub-probe", daemon=True)
        self._prober.start()
        self.replayer.start()
        if self.replica is not None:
            self.replica.start()

    def request_stop(self) -> None:
        self._stopping.set()
        self.replayer.request_stop()
        if self.replica is not None:
            self.replica.request_stop()

    def stop(self, timeout: float = 3.0) -> bool:
        """Both threads ended within ``timeout`` (a send in flight may take the hub's timeout): queued rows stay."""
        deadline = time.monotonic() + timeout
        self.request_stop()
        ended = self.replayer.join(max(0.0, deadline - time.monotonic()))
        if self._prober is not None:
            self._prober.join(max(0.0, deadline - time.monotonic()))
            ended = ended and not self._prober.is_alive()
        if self.replica is not None:
            ended = self.replica.stop(max(0.0, deadline - time.monotonic())) and ended
        if ended:
            self.queue.queue.close()
        return ended

    def reconfigure(self, config: Config) -> list[str]:
        """SIGHUP: the hub's URL, key file or timeout anew (the key read again); OSError/ValueError: the old stay."""
        client = hub_client(config)
        changed = []
        if (client.url, client.timeout_s) != (
            self.client.url,
            self.client.timeout_s,
        ) or client._key != self.client._key:
            changed.append("conversation.hub")
        self.config, self.client = config, client
        return changed

    def _probe_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                answer = self.client.send(None, "GET", HEALTH_PATH)
            except HubUnreachable as exc:
                self._down(str(exc))
            else:
                if answer.status == 200 and isinstance(answer.data, dict):
                    self.hub_host = str(answer.data.get("host") or "") or None
                    self.writes.llm_configured = bool(answer.data.get("infer_default"))
                    self._up(answer)
                else:
                    message = answer.data.get("error") if isinstance(answer.data, dict) else None
                    self._down(f"the hub answered {answer.status}: {message or 'no message'}")
            self._stopping.wait(self.config.conversation.probe_interval_s)

    def _up(self, answer: HubAnswer) -> None:
        changed = self.reachable is not True
        self.reachable, self.down_since, self.rtt_ms = True, None, answer.rtt_ms
        self.last_contact = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if changed:
            log.info("the hub %s is reachable", self.client.url)
            self.replayer.wake(hub_back=True)
            if self.replica is not None:
                self.replica.wake()
            self.on_change()

    def _down(self, why: str) -> None:
        changed = self.reachable is not False
        self.reachable, self.last_error, self.rtt_ms = False, why, None
        if self.down_since is None:
            self.down_since = time.monotonic()
        if changed:
            log.warning("the hub %s is unreachable: %s", self.client.url, why)
            self.on_change()

    # ------------------------------------------------------------ one request

    def _send(
        self, agent: str, method: str, path: str, params: dict[str, Any] | None, body: dict[str, Any] | None
    ) -> HubAnswer:
        """One request as ``agent``, the hub's reachability noted; HubUnreachable when it does not answer."""
        try:
            answer = self.client.send(agent, method, path, params, body)
        except HubUnreachable as exc:
            self._down(str(exc))
            raise
        if answer.status == 401:  # the key is not (or no longer) enrolled: the operator's to fix, said so
            self._down(f"the hub refused this host's key (401): {hub_message(answer)}")
        else:
            self._up(answer)
        return answer

    @staticmethod
    def _answered(answer: HubAnswer) -> dict[str, Any]:
        """The hub's answer, or its refusal raised with its status (HubAnswerError)."""
        if answer.status >= 400:
            headers = {"Retry-After": answer.retry_after} if answer.retry_after else None
            raise HubAnswerError(answer.status, hub_message(answer), headers)
        if not isinstance(answer.data, dict):
            raise HubAnswerError(502, "the hub's answer is not a JSON object")
        return answer.data

    def _ask(self, o: Operation, agent: str) -> dict[str, Any]:
        """``o`` sent as ``agent``; the hub's answer, or its refusal raised with its status (HubAnswerError)."""
        method, path, params, body = o.request()
        return self._answered(self._send(agent, method, path, params, body))

    def _call(self, o: Operation, agent: str) -> dict[str, Any]:
        try:
            return self._ask(o, agent)
        except HubUnreachable as exc:
            raise ConversationUnavailableError(f"the hub is unreachable ({exc}): {NOT_CHANGED}") from None

    # ------------------------------------------------------------ add: to the hub, or queued for it

    def add(self, o: Add, *, admin: bool = False) -> dict[str, Any]:
        """``admin`` is not passed on: the hub knows this host's agents, never its administrator.

        A superseding add is never queued (the hub must see the memory it replaces): 503 while it is
        away.  Any other add goes to the hub with a write_id (the caller's, or one made here), or to the
        queue when the hub is away or anything is queued already.
        """
        if o.supersedes is not None:
            return self._changing(o, o.agent)
        agent = o.agent
        method, path, params, body = o.request()
        body = dict(body or {})
        write_id = str(body.setdefault("write_id", str(uuid.uuid4())))  # before the first send: a lost answer
        if o.write_id is not None and self.queue.contains(write_id, agent):
            return self._queued(o, write_id, "this write_id is already queued for the hub")
        request = entry(method, path, params, body)
        if self.queue.depth():  # None: the queue cannot be read now; the hub is asked
            return self._enqueue(o, request, write_id, "earlier writes are queued for the hub")
        if self.reachable is False:  # the prober's (or the last request's) word: no wait for a timeout
            return self._enqueue(o, request, write_id, f"the hub is unreachable ({self.last_error})")
        try:
            answer = self._send(agent, method, path, params, body)
        except HubUnreachable as exc:
            return self._enqueue(o, request, write_id, f"the hub is unreachable ({exc})")
        if answer.status in AWAY:
            return self._enqueue(o, request, write_id, f"the hub answered {answer.status}: {hub_message(answer)}")
        self._changed_on_hub()
        return self._answered(answer)

    def _changed_on_hub(self) -> None:
        """An agent of this host changed something on the hub: the replica asks the feed at once."""
        if self.replica is not None:
            self.replica.wake()

    def _enqueue(self, o: Add, request: dict[str, Any], write_id: str, why: str) -> dict[str, Any]:
        """The add in the spoke's queue, synced before the answer; NotStoredError when its disk refuses it.

        A secret is refused first (never_store, as the hub would at the replay): it is never kept here."""
        guard = self.guard()
        refuse_secrets(guard, self.audit, o.agent, [o.text], "text")
        ids = [v for v in (o.user_id, o.run_id, o.actor_id) if isinstance(v, str)]
        refuse_secrets(guard, self.audit, o.agent, ids + list(strings(o.metadata or {})), "metadata")
        queue = self.queue.queue
        try:
            if not queue.opened:
                queue.open()
            new = queue.put(write_id, o.agent, request)
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            self.storage.failed("queue", exc, path=queue.path)
            raise NotStoredError(
                f"not stored: {why}, and the queue {queue.path} cannot be written "
                f"({self.storage.error('queue') or 'see status'}); nothing was kept: write it again once there is space"
            ) from None
        self.storage.succeeded("queue")
        self.replayer.wake()
        self.on_change()
        return self._queued(o, write_id, why if new else "this write_id is already queued for the hub")

    def _queued(self, o: Add, write_id: str, reason: str) -> dict[str, Any]:
        """A queued add's answer (writes.py's shape): where it goes is the hub's to decide, at the replay."""
        ahead = self.queue.read(lambda: self.queue.queue.ahead_of(write_id, o.agent), 0) or 0
        asked = {k: v for k, v in (("user_id", o.user_id), ("run_id", o.run_id), ("actor_id", o.actor_id)) if v}
        return {
            "write_id": write_id,
            "visibility": o.visibility or ("project" if o.project else "undecided"),  # the hub places it
            "project_id": o.project,
            "visibility_inferred": False,
            "memory_type": o.memory_type or DEFAULT_TYPE,
            "expiration_date": o.expires,
            "infer": self.writes.llm_configured if o.infer is None else o.infer,
            **asked,
            **({"metadata": o.metadata} if o.metadata else {}),
            "queued": True,
            "ahead": ahead,
            "reason": f"{reason}: {ahead:,} ahead; sent to the hub once it answers",
        }

    # ------------------------------------------------------------ requests (as the broker's)

    def update(self, o: Update) -> dict[str, Any]:
        return self._changing(o, o.agent)

    def delete(self, agent: str, memory_id: str) -> dict[str, Any]:
        return self._changing(Delete(agent, memory_id), agent)

    def restore_memory(self, o: RestoreMemory) -> dict[str, Any]:
        return self._changing(o, o.agent)

    def delete_all(self, o: DeleteAll) -> dict[str, Any]:
        return self._changing(o, o.agent)

    def _changing(self, o: Operation, agent: str) -> dict[str, Any]:
        answer = self._call(o, agent)
        self._changed_on_hub()
        return answer

    def _read(
        self, o: Operation, agent: str, what: str, away: Callable[[str], dict[str, Any] | None]
    ) -> dict[str, Any]:
        """A read the hub answers; with the hub unreachable (or its store down: its 503) ``away(reason)`` answers
        (this host's replica), and when it cannot (None) the answer is as it always was."""
        try:
            return self._ask(o, agent)
        except HubUnreachable as exc:
            reason = f"the hub is unreachable ({exc})"
            refusal: Exception = ConversationUnavailableError(f"{reason}: {NOT_CHANGED}")
        except HubAnswerError as exc:
            if exc.status != 503:
                raise
            reason, refusal = f"the hub cannot {what} now ({exc})", exc
        answer = away(reason)
        if answer is None:
            raise refusal from None
        return answer

    def search(self, o: MemorySearch) -> dict[str, Any]:
        def away(reason: str) -> dict[str, Any]:
            if self.replica is not None:
                answer = self.replica.search(o, reason)  # what this host's agents may read, as the hub last said
                if answer is not None:
                    return answer
            return l3_fallback(o, reason, self.local_search)

        return self._read(o, o.agent, "search", away)

    def get_all(self, o: List) -> dict[str, Any]:
        replica = self.replica

        def away(reason: str) -> dict[str, Any] | None:
            return replica.get_all(o, reason) if replica is not None else None

        return self._read(o, o.agent, "list", away)

    def get(self, agent: str, memory_id: str, admin: bool = False) -> dict[str, Any]:
        """``admin`` asks as ``agent`` (the hub knows no administrator of a spoke); from the replica it sees
        exactly what ``agent`` may, and a memory of this host ``agent`` may not read is audited as on the hub."""
        replica = self.replica

        def denied(memory: dict[str, Any]) -> None:
            audit_denied(self.audit, "read_denied", agent, memory)

        def away(reason: str) -> dict[str, Any] | None:
            return replica.get(agent, memory_id, reason, denied) if replica is not None else None

        return self._read(Get(agent, memory_id), agent, "answer", away)

    def history(self, agent: str, memory_id: str) -> dict[str, Any]:
        """The hub's answer; with the hub unreachable a clear refusal (503): the replica keeps each memory as it
        is now, not its events, so a history from it would leave out every update and delete."""
        try:
            return self._ask(History(agent, memory_id), agent)
        except HubUnreachable as exc:
            raise ConversationUnavailableError(f"the hub is unreachable ({exc}): {HISTORY_NEEDS_HUB}") from None

    # ------------------------------------------------------------ maintenance: the hub's

    def wait_until_open(self, what: str, wait_s: float | None = None) -> None:
        raise ConflictError(f"{what}: {RUN_ON_THE_HUB}")

    def cleanup(self, o: Cleanup) -> dict[str, Any]:
        raise ConflictError(f"cleanup: {RUN_ON_THE_HUB}")

    def consolidate(self, options: ConsolidateOptions) -> dict[str, Any]:
        raise ConflictError(f"consolidate: {RUN_ON_THE_HUB}")

    def backup(self, keep: int) -> dict[str, Any]:
        raise ConflictError(f"backup: {RUN_ON_THE_HUB}")

    def restore(self, archive: Path) -> dict[str, Any]:
        raise ConflictError(f"restore-backup: {RUN_ON_THE_HUB}")

    # ------------------------------------------------------------ status

    def status(self) -> HubConversationStatus:
        down_for = None if self.down_since is None else round(time.monotonic() - self.down_since, 1)
        return {
            "enabled": True,
            "backend": "hub",
            "url": self.client.url,  # the administrator's view only (app.py's scoped_status)
            "reachable": bool(self.reachable),
            "rtt_ms": self.rtt_ms,
            "breaker": {
                "state": "closed" if self.reachable else "open",
                "last_error": self.last_error,
                "down_for_s": down_for,
            },
            "last_error": self.last_error,
            "error": None,
            "infer_default": self.writes.llm_configured,
            "queue": self._queue_status(),
            "hub": {
                "host": self.hub_host,  # this host's name as the hub knows it
                "last_contact": self.last_contact,
                "replay_error": self.replayer.last_error,  # the last failed send of a queued add
            },
            **({"replica": self.replica.status()} if self.replica is not None else {}),
        }

    def _queue_status(self) -> QueueStatus:
        """The adds queued for the hub, as the broker's queue shows (status_section.py's keys)."""
        queue, replayer = self.queue, self.replayer
        return {
            "depth": queue.view(queue.queue.depth),
            "oldest_age_s": queue.view(queue.queue.oldest_age_s),
            "writable": not self.storage.failing("queue"),
            "replayed": replayer.replayed,
            "skipped_already_written": replayer.skipped,
            "replay_rate_per_s": None,
            "eta_s": None,
            "set_aside": queue.view(queue.queue.set_aside_count),
            "set_aside_recent": queue.view(lambda: queue.queue.set_aside_writes(limit=5)),  # never the text
            "unflushed": 0,  # a row leaves only once the hub answered: the hub's disk has it
            "checkpoints": 0,
            "checkpoint_error": "",
        }
