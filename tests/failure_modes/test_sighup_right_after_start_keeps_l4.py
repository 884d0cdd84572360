"""A SIGHUP right after ``memstrata run`` starts neither kills the daemon nor leaves L4 off.

Issue 45, two faults (reproduced on the code before the fix):

- a SIGHUP 0.3-0.8 s after the spawn ended the process (its default action: the loop installed its
  handlers only once the daemon was built), and ``systemctl reload`` or an operator's ``kill -HUP``
  in that window stopped memory service;
- a SIGHUP carrying a changed ``conversation.*`` setting soon after the start swapped the store while
  a job still held the old object: that job reopened the old Edge shard after the swap, kept its
  lock, and the new store could never connect ("open in another process or handle", the store off
  until a restart).

Each moment is its own daemon: the SIGHUP is sent that long after the spawn (the moments are the
scenario, not a synchronisation), then the daemon must still run, an L4 add must be stored (not
queued) and status must show the store reachable.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for


def prepared(root: Path) -> Path:
    config = init_root(root, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "a", config=config)
    return config


def change_a_store_setting(config: Path) -> None:
    """A ``conversation.*`` change that makes the reload reconnect the store (another timeout)."""
    data = yaml.safe_load(config.read_text())
    data.setdefault("conversation", {}).setdefault("qdrant", {})["timeout_s"] = 7
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def reachable(daemon) -> bool:
    if daemon.proc.poll() is not None:
        raise AssertionError(f"the daemon died (exit {daemon.proc.returncode}):\n{daemon.log()}")
    try:
        conversation = daemon.status()["conversation"]
    except Exception:  # not serving yet
        return False
    assert not conversation.get("error"), conversation
    return bool(conversation.get("reachable"))


@pytest.mark.parametrize("after_s", [0.3, 0.6, 1.0, 2.0, "ready"])
def test_sighup_soon_after_start_keeps_the_daemon_and_reconnects_the_store(tmp_path, daemons, after_s):
    config = prepared(tmp_path)
    started = time.monotonic()
    daemon = daemons(config, wait=after_s == "ready")
    change_a_store_setting(config)
    if after_s != "ready":
        time.sleep(max(0.0, after_s - (time.monotonic() - started)))
    daemon.signal(signal.SIGHUP)

    wait_for(lambda: reachable(daemon), timeout=60, what=f"the store reachable after the SIGHUP\n{daemon.log()}")
    with DaemonClient(daemon.socket, timeout=30, token=token_of(tmp_path, "a")) as client:
        answer = client.add("a", "SIGHUP 之后写入的记忆 (written after the reload)", type="knowledge")
        assert answer["queued"] is False, answer
        memory_id = answer["results"][0]["id"]
        assert client.get("a", memory_id)["memory"].startswith("SIGHUP")
    assert daemon.proc.poll() is None
    assert "open in another" not in daemon.log()
    assert daemon.stop() == 0
