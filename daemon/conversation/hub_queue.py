"""A spoke's adds while the hub is away (issue 48): kept in the spoke's durable queue, replayed to the hub.

The queue is the local broker's (layers/conversation/lifecycle/durable_queue.py, the usual path): a
row is synced before the caller hears ``queued``, so neither SIGKILL nor a power cut loses it.  A row
here holds the request as it travels to the hub (under :data:`FORM`) with its write_id, the writer's
own: the hub applies ``(HOST/AGENT, write_id)`` once, and answers a retry as made (EXISTS), so a row
sent again after a crash, or after an answer lost on the link, is never written twice.

One thread (``hub-replay``) drains the queue in order once the hub answers.  A row leaves the queue
only after the hub answered it (ADD, EXISTS, NOOP, or ``queued`` on the hub's own disk): what the hub
answers is on its disk, so nothing is lost by the removal.  No answer (refused, timed out), a 5xx, or
a 4xx that means "not now" (401: the host's key, the operator's to fix; 408, 429) stops the drain and
waits for the back-off (daemon/common/backoff.py), or for the prober to see the hub again.  Any other
4xx (the hub's guard, an agent no longer enrolled, 413) is the request's fault and would block every
write behind it for ever: the row is set aside as the local replay sets one aside (kept in the queue
file with the reason, audited, counted in status), and the rest go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from daemon.common.audit import AuditLog
from daemon.common.backoff import backoff
from daemon.conversation.hub_client import HubAnswer, HubUnreachable
from daemon.conversation.queue import QueueAccess
from layers.conversation.lifecycle.durable_queue import QueuedWrite

log = logging.getLogger(__name__)

FORM = "hub"  # a row's request, as sent to the hub: {"method", "path", "params", "body"}
AWAY = frozenset({502, 503, 504})  # the hub's answers that mean "not there now": an add is queued
NOT_NOW = frozenset({401, 408, 429})  # 4xx a later try may pass: retried, never set aside
BATCH = 32  # rows read at a time (each sent alone: the hub answers each by its write_id)
FIRST_WAIT_S = 1.0  # the back-off after a failed send: 1 s, doubling, at most the cap
WAIT_CAP_S = 60.0

Send = Callable[[str, str, str, dict[str, Any] | None, dict[str, Any] | None], HubAnswer]


def entry(method: str, path: str, params: dict[str, Any] | None, body: dict[str, Any]) -> dict[str, Any]:
    """A queue row's request: what :class:`HubReplayer` sends to the hub as the row's agent."""
    return {FORM: {"method": method, "path": path, "params": params, "body": body}}


def hub_message(answer: HubAnswer) -> str:
    message = answer.data.get("error") if isinstance(answer.data, dict) else None
    return str(message or f"the hub answered {answer.status}")


class HubReplayer:
    """Drains the spoke's queue to the hub, in order, each row exactly once by its writer's write_id."""

    def __init__(
        self,
        queue: QueueAccess,
        send: Send,  # HubBroker's: one request as an agent; HubUnreachable when no answer (reachability noted)
        audit: AuditLog,
        on_change: Callable[[], None],
        idle_s: Callable[[], float],  # how long to sleep with nothing queued (the probe interval)
    ) -> None:
        self.queue = queue
        self.send = send
        self.audit = audit
        self.on_change = on_change
        self.idle_s = idle_s
        self.replayed = 0  # rows the hub wrote (ADD, or queued on its own disk)
        self.skipped = 0  # rows the hub had already (EXISTS, NOOP): sent before, the answer lost
        self.set_aside = 0  # rows the hub refused, since the start
        self.failures = 0  # failed sends in a row
        self.last_error: str | None = None
        self.attention = threading.Event()
        self._next_try = 0.0  # monotonic: no send before this (the back-off)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="hub-replay", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        self._stopping.set()
        self.attention.set()

    def join(self, timeout: float) -> bool:
        """True when the loop ended (a send in flight ends within the hub's timeout)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wake(self, hub_back: bool = False) -> None:
        """A row was queued (sent once the back-off has passed), or the hub answers again (sent now)."""
        if hub_back:
            self._next_try = 0.0
        self.attention.set()

    # ------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.attention.clear()  # before the drain: a row queued meanwhile wakes the wait below
            try:
                delay = self._drain()
            except Exception:  # the replayer must survive anything
                log.exception("replay to the hub failed")
                delay = WAIT_CAP_S
            if delay > 0:
                self.attention.wait(delay)

    def _drain(self) -> float:
        """Send the next rows; how long to wait before the next round (0: go on at once)."""
        now = time.monotonic()
        if now < self._next_try:
            return self._next_try - now
        access, queue = self.queue, self.queue.queue
        if not queue.opened and not access.open():
            return WAIT_CAP_S  # a full or read-only disk: storage retries it; status says so
        nothing: list[QueuedWrite] = []
        rows = access.read(lambda: queue.peek(BATCH), nothing)
        if not rows:
            return self.idle_s()
        for handled, row in enumerate(rows):
            if self._stopping.is_set():
                break  # the rest stays queued for the next start
            if not self._replay(row):
                self.failures += 1
                wait = backoff(self.failures, FIRST_WAIT_S, WAIT_CAP_S)
                self._next_try = time.monotonic() + wait
                if handled:
                    self.on_change()
                return wait
        self.failures = 0
        self.on_change()
        if access.depth() == 0:
            log.info(
                "queue for the hub drained: %d written, %d already there, %d set aside",
                self.replayed,
                self.skipped,
                self.set_aside,
            )
        return 0.0

    def _replay(self, row: QueuedWrite) -> bool:
        """One row to the hub; True when it left the queue (answered or set aside), False to retry later."""
        request = row.request.get(FORM)
        if not isinstance(request, dict):
            # the local broker's row (this host ran backend embedded or remote before): not the hub's to take
            return self._set_aside(row, "not a write for the hub (queued by this host's own store before)", None)
        try:
            answer = self.send(row.agent_id, request["method"], request["path"], request["params"], request["body"])
        except HubUnreachable as exc:
            return self._failed(row, f"the hub is unreachable ({exc})")
        if answer.status >= 500 or answer.status in NOT_NOW:
            return self._failed(row, f"the hub answered {answer.status}: {hub_message(answer)}")
        if answer.status >= 400:
            return self._set_aside(row, f"the hub refuses it ({answer.status}): {hub_message(answer)}", answer.status)
        queue = self.queue.queue
        # answered: on the hub's disk; a removal lost to a crash only sends it again (EXISTS)
        if not self.queue.storage.attempt("queue", lambda: queue.done(row.write_id, row.agent_id), path=queue.path):
            return False
        data = answer.data if isinstance(answer.data, dict) else {}
        events = [r.get("event") for r in data.get("results") or [] if isinstance(r, dict)]
        if not data.get("queued") and events and all(e in ("EXISTS", "NOOP") for e in events):
            self.skipped += 1
        else:
            self.replayed += 1
        self.last_error = None
        return True

    def _failed(self, row: QueuedWrite, why: str) -> bool:
        self.last_error = why
        self.queue.note(row.write_id, row.agent_id, why)
        return False

    def _set_aside(self, row: QueuedWrite, reason: str, status: int | None) -> bool:
        """A row the hub refuses: kept aside with the reason, so the rows behind it go on."""
        queue = self.queue.queue
        moved: list[bool] = []
        if not self.queue.storage.attempt(
            "queue", lambda: moved.append(queue.set_aside(row.write_id, row.agent_id, reason)), path=queue.path
        ):
            return False
        if moved and moved[0]:
            self.set_aside += 1
        log.warning("queued write %s of %s set aside: %s", row.write_id, row.agent_id, reason)
        self.audit.record(
            "queued_write_set_aside", agent=row.agent_id, write_id=row.write_id, reason=reason, hub_status=status
        )
        return True
