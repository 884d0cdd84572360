"""SIGHUP and ``conversation.*``: applied (the store reconnected, queued writes kept) or said to need a restart.

Before: the daemon re-read the file, logged "configuration reloaded" and went on with the
store it had: a switch from the embedded store to a remote url, another collection or
timeout, did nothing until a restart, and nothing said so.  Now the broker reconnects to
the new store (writes made meanwhile wait in the durable queue and are replayed, exactly
once), and what cannot change while running (``conversation.enabled``, paths, the vectors
model) is named in the log and in ``memstrata status`` as needing a restart.
"""

from __future__ import annotations

import signal

import yaml

from daemon.front.daemon_client import DaemonClient
from tests.daemon.conversation.test_conversation_outage import free_port
from tests.helpers import FAST, init_root, run_cli, token_of, wait_for, wait_reachable


def _edit(config, **conversation) -> None:
    data = yaml.safe_load(config.read_text())
    conv = data.setdefault("conversation", {})
    for key, value in conversation.items():
        if isinstance(value, dict):
            conv.setdefault(key, {}).update(value)
        else:
            conv[key] = value
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def _memories(client: DaemonClient) -> list[str]:
    return sorted(m["memory"] for m in client.get_all("a")["results"])


def test_sighup_reconnects_the_store_and_loses_no_queued_write(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "a", config=config)
    _edit(config, probe_interval_s=0.5)
    d = daemons(config)
    wait_reachable(d)
    client = DaemonClient(d.socket, timeout=120, token=token_of(tmp_path, "a"))
    assert not client.add("a", "written to the embedded store")["queued"]

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: the remote store is down
    _edit(config, backend="remote", qdrant={"url": dead, "timeout_s": 1})
    d.signal(signal.SIGHUP)
    wait_for(lambda: d.status()["conversation"]["backend"] == "remote", what="switched to the remote store")
    conversation = d.status()["conversation"]
    assert conversation["url"] == dead and conversation["reachable"] is False
    # the reload's summary line is written once the whole reload ran, maybe after status shows the new store
    log = wait_for(lambda: (lambda text: "configuration reloaded" in text and text)(d.log()), what="the reload logged")
    assert "conversation store (reconnected)" in log and "NOT applied until a restart" not in log
    assert client.add("a", "written while the new store is down")["queued"] is True
    wait_for(lambda: d.status()["conversation"]["queue"]["depth"] == 1, what="the write queued")

    _edit(config, backend="embedded")
    d.signal(signal.SIGHUP)
    wait_for(lambda: d.status()["conversation"]["backend"] == "embedded", what="back to the embedded store")
    wait_reachable(d)
    wait_for(lambda: d.status()["conversation"]["queue"]["depth"] == 0, timeout=60, what="the queue replayed")
    assert _memories(client) == ["written to the embedded store", "written while the new store is down"]
    assert d.status()["daemon"].get("restart_needed") is None
    assert d.stop() == 0


def test_what_sighup_cannot_apply_is_said_in_the_log_and_status(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    d = daemons(config)
    _edit(config, enabled=False)
    data = yaml.safe_load(config.read_text())
    data["paths"]["audit_dir"] = "{root}/elsewhere"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    d.signal(signal.SIGHUP)
    wait_for(lambda: d.status()["daemon"].get("restart_needed"), what="restart needed reported")
    assert d.status()["daemon"]["restart_needed"] == ["paths", "conversation.enabled"]
    wait_for(lambda: "NOT applied until a restart: paths, conversation.enabled" in d.log(), what="said in the log")
    assert "configuration reloaded" not in d.log(), "never 'reloaded' while ignoring a setting"
    shown = run_cli("status", config=config).stdout
    assert "RESTART NEEDED to apply paths, conversation.enabled" in shown
    assert d.status()["conversation"]["enabled"] is True, "still running with the old value"
    assert d.stop() == 0
