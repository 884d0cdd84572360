"""The daemon's log as an operator reads it (a real daemon): ``log.format: json`` lines, and
journald's native fields (``MEMSTRATA_AGENT=``, ``EVENT=``) over a journal socket; a secret in a
workspace never reaches either."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess

from tests.helpers import FAKE_AWS_KEY, LEAN, MEMSTRATA, DaemonProcess, init_root, wait_for

SECRET_NOTE = f"# notes\n\naws_access_key_id = {FAKE_AWS_KEY}\n"


def test_json_lines_carry_agent_and_event_and_no_secret(tmp_path, daemons):
    config = init_root(tmp_path, **LEAN, log={"format": "json"})
    d = daemons(config)
    (tmp_path / "workspace" / "memory" / "2026-11-22.md").write_text(SECRET_NOTE)
    wait_for(lambda: "holding back" in d.log(), what="the held-back file logged")
    assert d.stop() == 0
    records = [json.loads(line) for line in d.log().splitlines() if line.strip()]  # every line is JSON
    assert {"time", "level", "logger", "message"} <= set(records[0])
    held = next(r for r in records if "holding back" in r["message"])
    assert (held["agent"], held["event"], held["level"]) == ("main", "held_back", "warning")
    assert any(r["message"].startswith("ready: ") for r in records)
    assert FAKE_AWS_KEY not in d.log()


def _datagrams(sock: socket.socket) -> list[dict[str, str]]:
    """Every datagram waiting on ``sock``, decoded as journald decodes the native protocol."""
    out = []
    sock.setblocking(False)
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        fields, i = {}, 0
        while i < len(data):
            end = data.index(b"\n", i)
            line = data[i:end]
            if b"=" in line:
                key, _, value = line.partition(b"=")
                i = end + 1
            else:
                key = line
                (size,) = struct.unpack("<Q", data[end + 1 : end + 9])
                value = data[end + 9 : end + 9 + size]
                i = end + 9 + size + 1
            fields[key.decode()] = value.decode()
        out.append(fields)


def test_under_journald_native_fields_reach_the_journal_socket(tmp_path):
    config = init_root(tmp_path, **LEAN)
    journal = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    journal.bind(str(tmp_path / "journal.sock"))
    stream = tmp_path / "stream.log"  # stands for journald's stream: JOURNAL_STREAM names it
    with open(stream, "wb") as err:
        st = os.fstat(err.fileno())
        env = {
            **os.environ,
            "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}",
            "MEMSTRATA_JOURNAL_SOCKET": str(tmp_path / "journal.sock"),
        }
        proc = subprocess.Popen([*MEMSTRATA, "--config", str(config), "run"], stderr=err, env=env)
        try:
            probe = DaemonProcess(config)
            wait_for(lambda: probe.status()["daemon"]["running"], timeout=60, what="daemon up")
            (tmp_path / "workspace" / "memory" / "2026-11-22.md").write_text(SECRET_NOTE)
            seen: list[dict[str, str]] = []
            wait_for(
                lambda: seen.extend(_datagrams(journal)) or any(f.get("EVENT") == "held_back" for f in seen),
                what="the held-back record in the journal",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    seen.extend(_datagrams(journal))
    held = next(f for f in seen if f.get("EVENT") == "held_back")
    assert held["MEMSTRATA_AGENT"] == "main" and held["PRIORITY"] == "4" and held["SYSLOG_IDENTIFIER"] == "memstrata"
    assert "memory/2026-11-22.md" in held["MESSAGE"] and held["LOGGER"].startswith("daemon.")
    assert any("ready: " in f["MESSAGE"] for f in seen)
    assert all(FAKE_AWS_KEY not in value for f in seen for value in f.values())
    assert FAKE_AWS_KEY not in stream.read_text(errors="replace")
    assert "holding back" not in stream.read_text(errors="replace"), "sent to the journal, not also the stream"
