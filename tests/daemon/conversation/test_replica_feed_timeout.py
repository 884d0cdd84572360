"""A feed request a cut link caught in flight gives up before the hub's whole timeout (issue 48).

The fleet bench saw replicas catch up 12 s after the link returned: the request in flight when the link
dropped waited out ``conversation.hub.timeout_s`` before the next poll could see the hub again.  A feed
page asks for little, so its request gives up at FEED_TIMEOUT_S; the request after a timed-out one waits
the whole timeout, so a hub slow to answer a page is still followed.
"""

from __future__ import annotations

import socket
import time

import pytest

from daemon.conversation.hub_client import HubClient, HubUnreachable
from daemon.conversation.hub_replica import FEED_TIMEOUT_S, HubReplica
from layers.conversation.policy.decay import DEFAULT_DECAY


def test_a_feed_request_to_a_hub_that_never_answers_gives_up_before_the_hubs_timeout(tmp_path):
    silent = socket.socket()  # accepts connections (the backlog), never answers: a link cut mid-request
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    replica = HubReplica(
        tmp_path / "replica",
        client=lambda: HubClient(url, "k" * 43, timeout_s=60.0),
        embedder=lambda: None,
        decay=DEFAULT_DECAY,
        host=lambda: "spoke-1",
    )
    try:
        started = time.monotonic()
        with pytest.raises(HubUnreachable, match="no answer within"):
            replica.poll()
        waited = time.monotonic() - started
        assert waited < FEED_TIMEOUT_S + 10, f"the feed request waited {waited:.1f} s (the hub's timeout is 60 s)"
        assert replica._feed_timed_out  # the next request waits the whole timeout
    finally:
        silent.close()
