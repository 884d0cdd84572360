"""A spoke's L4 is the hub's (``conversation.backend: hub``, issue 48): the broker that asks the hub.

In place of daemon/conversation/broker.py's ``Broker``, with the methods the API app and mem0's REST
API call.  Each operation goes to the hub's peer API (daemon/api/peer.py) as the calling agent
(``X-Memstrata-Agent``: its local id) with this host's key; the hub acts as ``HOST/AGENT`` and applies
every rule there, and its answer (status and JSON) is passed on unchanged, so the CLI, the skill,
MCP and mem0's REST surface work the same on a spoke.  Answers that name an owner name ``HOST/AGENT``.

The hub unreachable (refused, reset, timed out): a search is answered from the caller's own L3 index,
``degraded: true`` with the reason, exactly as the broker answers with its store down (reads.py's
``l3_fallback``); every other operation is 503 saying so.  Writes are not queued for replay yet (the
next slice: the durable queue between spoke and hub); a prober asks the hub's health every
``conversation.probe_interval_s`` so that status says whether it is there.  Maintenance (cleanup,
consolidation, backup, restore) is the hub's: here it answers 409 saying so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from daemon.common.audit import AuditLog
from daemon.common.config import Config
from daemon.common.contracts import HubConversationStatus, SearchAnswer
from daemon.common.domain_errors import ConflictError, ConversationUnavailableError, HubAnswerError
from daemon.conversation.hub_client import HEALTH_PATH, HubAnswer, HubClient, HubUnreachable, read_key
from daemon.conversation.reads import l3_fallback
from daemon.ops.consolidation import ConsolidateOptions
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

NOT_QUEUED = "nothing was stored; try again once it is back (a spoke does not queue writes for the hub yet)"
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
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.client = hub_client(config)  # may raise: the daemon says conversation memory cannot start
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

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._prober = threading.Thread(target=self._probe_loop, name="hub-probe", daemon=True)
        self._prober.start()

    def request_stop(self) -> None:
        self._stopping.set()

    def stop(self, timeout: float = 3.0) -> bool:
        self.request_stop()
        if self._prober is not None:
            self._prober.join(timeout)
            return not self._prober.is_alive()
        return True

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

    def _ask(self, o: Operation, agent: str) -> dict[str, Any]:
        """``o`` sent as ``agent``; the hub's answer, or its refusal raised with its status (HubAnswerError)."""
        method, path, params, body = o.request()
        try:
            answer = self.client.send(agent, method, path, params, body)
        except HubUnreachable as exc:
            self._down(str(exc))
            raise
        message = answer.data.get("error") if isinstance(answer.data, dict) else None
        if answer.status == 401:  # the key is not (or no longer) enrolled: the operator's to fix, said so
            self._down(f"the hub refused this host's key (401): {message}")
        else:
            self._up(answer)
        if answer.status >= 400:
            headers = {"Retry-After": answer.retry_after} if answer.retry_after else None
            raise HubAnswerError(answer.status, str(message or f"the hub answered {answer.status}"), headers)
        if not isinstance(answer.data, dict):
            raise HubAnswerError(502, "the hub's answer is not a JSON object")
        return answer.data

    def _call(self, o: Operation, agent: str) -> dict[str, Any]:
        try:
            return self._ask(o, agent)
        except HubUnreachable as exc:
            raise ConversationUnavailableError(f"the hub is unreachable ({exc}): {NOT_QUEUED}") from None

    # ------------------------------------------------------------ requests (as the broker's)

    def add(self, o: Add, *, admin: bool = False) -> dict[str, Any]:
        """``admin`` is not passed on: the hub knows this host's agents, never its administrator."""
        return self._call(o, o.agent)

    def update(self, o: Update) -> dict[str, Any]:
        return self._call(o, o.agent)

    def delete(self, agent: str, memory_id: str) -> dict[str, Any]:
        return self._call(Delete(agent, memory_id), agent)

    def restore_memory(self, o: RestoreMemory) -> dict[str, Any]:
        return self._call(o, o.agent)

    def delete_all(self, o: DeleteAll) -> dict[str, Any]:
        return self._call(o, o.agent)

    def search(self, o: MemorySearch) -> dict[str, Any]:
        try:
            return self._ask(o, o.agent)
        except HubUnreachable as exc:
            reason = f"the hub is unreachable ({exc})"
        except HubAnswerError as exc:
            if exc.status != 503:
                raise
            reason = f"the hub cannot search now ({exc})"
        return l3_fallback(o, reason, self.local_search)

    def get_all(self, o: List) -> dict[str, Any]:
        return self._call(o, o.agent)

    def get(self, agent: str, memory_id: str, admin: bool = False) -> dict[str, Any]:
        return self._call(Get(agent, memory_id), agent)

    def history(self, agent: str, memory_id: str) -> dict[str, Any]:
        return self._call(History(agent, memory_id), agent)

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
            "hub": {
                "host": self.hub_host,  # this host's name as the hub knows it
                "last_contact": self.last_contact,
                "queue": "writes are not queued while the hub is away (the next slice)",
            },
        }
