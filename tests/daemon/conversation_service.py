"""An in-process service with L4 enabled: the real broker over the real embedded store, or over none.

Built as ``MemoryDaemon.start`` builds it, without the socket, the watcher or the
loop thread: the broker (daemon/conversation/broker.py) over a ConversationStore
on the root's state directory (Qdrant Edge, real files), or over a remote server
at a closed port (every store call fails: the outage paths).  The embedder is the
stand-in HTTP endpoint (tests/stand_in_embedder.py): equal texts get equal
vectors, and no model is loaded.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from daemon.conversation.broker import Broker, queue_path, store_settings
from layers.conversation.adapters.store import ConversationStore
from layers.conversation.lifecycle.durable_queue import WriteQueue
from layers.conversation.policy.registry import RegistryCache
from tests.daemon.conftest import Service
from tests.helpers import wait_for
from tests.stand_in_embedder import KEY, KEY_ENV, StandInEmbedder


def closed_port() -> int:
    """A local TCP port nobody listens on (connections to it are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable() -> dict:
    """``conversation`` settings of a remote store that refuses every connection."""
    return {"backend": "remote", "qdrant": {"url": f"http://127.0.0.1:{closed_port()}", "timeout_s": 1}}


def enable(config_path: Path, embedder: StandInEmbedder, **conversation: object) -> None:
    """Turn L4 on in ``config_path`` (the embedded store unless ``conversation`` says otherwise), with the
    stand-in as the embedder (its key is in the environment while :func:`l4_service` runs)."""
    embedder.configure(config_path)
    data = yaml.safe_load(config_path.read_text())
    data["conversation"] = {"enabled": True, **conversation}
    config_path.write_text(yaml.safe_dump(data, sort_keys=False))


def make_broker(service: Service) -> Broker:
    """The broker of ``service``'s daemon, composed as the daemon composes it at start (its audit log the daemon's)."""
    d = service.daemon
    embedder = d.embedder  # the stand-in's (vectors.backend: openai), shared by L3 and L4
    assert embedder is not None
    store = ConversationStore(store_settings(d.config), embedder, embedder.dimension())
    return Broker(
        d.config,
        store,
        queue=WriteQueue(queue_path(d.config)),
        registry=RegistryCache(d.config.paths.registry),
        audit=d.audit,
        local_search=d.search,
        guard=lambda: d.guard,
        embedder_ready=embedder.not_ready,
        storage=d.storage,
    )


@contextlib.contextmanager
def l4_service(config_path: Path, *, start: bool = True) -> Iterator[Service]:
    """A service on ``config_path`` (L4 enabled there by :func:`enable`) whose ``daemon.broker`` is set.

    ``start``: the broker's probe thread runs (it opens the store and replays the
    queue) and the store is reachable before this yields; otherwise nothing runs.
    The broker is stopped on the way out (once: a stopped broker is not stopped again).
    """
    with pytest.MonkeyPatch.context() as env:
        env.setenv(KEY_ENV, KEY)
        service = Service(config_path.parent, config_path).open()
        broker = service.daemon.broker = make_broker(service)
        try:
            if start:
                broker.start()
                wait_for(lambda: broker.status()["reachable"], timeout=60, what="the conversation store opens")
            yield service
        finally:
            ended = broker.stop(5)
            service.close()
    assert ended, "every thread of the broker ended within its stop"
