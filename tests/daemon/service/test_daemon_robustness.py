"""The daemon facing systemd, hostile files and exhausted inotify: real subprocess, real sockets."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import FAKE_API_KEY, FAST, committed, git, init_root, wait_for


def test_notify_socket_receives_ready_status_watchdog_and_stopping(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(0.05)
    messages: list[str] = []

    def received(prefix: str) -> bool:
        """Drain what has arrived so far (pings keep coming, so never wait for silence long)."""
        try:
            while True:
                messages.append(sock.recv(4096).decode())
        except TimeoutError:
            pass
        return any(line.startswith(prefix) for m in messages for line in m.splitlines())

    d = daemons(config, env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000"}, wait=False)
    wait_for(lambda: received("READY=1"), what="READY=1")
    ready = next(m for m in messages if "READY=1" in m)
    assert "STATUS=1 agent, " in ready and " files" in ready
    wait_for(
        lambda: received("WATCHDOG=1") and sum(m.count("WATCHDOG=1") for m in messages) >= 2,
        what="repeated WATCHDOG=1 pings",
    )
    assert d.stop() == 0
    assert received("STOPPING=1")
    sock.close()


def test_huge_and_non_utf8_files_do_not_crash_and_are_reported(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    with open(ws / "memory" / "2026-11-27.md", "wb") as fh:  # 50 MB
        line = b"a long line of daily memory that keeps going and going " * 4 + b"\n"
        for _ in range(50 * 1024 * 1024 // len(line) + 1):
            fh.write(line)
    (ws / "memory" / "2026-11-28.md").write_bytes(b"caf\xe9 latin-1 \xff\xfe not utf-8\n")
    (ws / "memory" / "2026-11-29.md").write_text("still fine\n")
    # generous: on a loaded host git may first spend a while on the 50 MB file beside it
    wait_for(lambda: committed(ws, "A", "memory/2026-11-29.md"), timeout=60, what="ordinary work continues")

    def both_reported():
        skipped = {r["path"]: r["reason"] for r in d.agent("main")["skipped"]}
        not_indexed = {r["path"]: r["reason"] for r in d.agent("main")["not_indexed"]}
        return "memory/2026-11-27.md" in skipped and "memory/2026-11-28.md" in not_indexed and (skipped, not_indexed)

    skipped, not_indexed = wait_for(both_reported, what="both files reported")
    assert "larger than watch.max_file_mb" in skipped["memory/2026-11-27.md"]
    assert "not valid UTF-8" in not_indexed["memory/2026-11-28.md"]
    assert d.status()["limits"]["max_file_mb"] == 5
    # not UTF-8 is still memory: versioned, just not indexed; over the size limit is not read at all
    wait_for(lambda: committed(ws, "A", "memory/2026-11-28.md"))
    assert "2026-11-27.md" not in git(ws, "ls-files")
    assert d.proc.poll() is None


def test_symlinks_leading_outside_are_never_followed(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"{FAKE_API_KEY}\n")
    os.mkfifo(outside / "pipe")  # opening this would block the daemon for ever
    os.symlink(outside / "secret.md", ws / "memory" / "2026-01-01.md")
    os.symlink(outside / "pipe", ws / "memory" / "2026-01-02.md")
    os.symlink(outside, ws / "memory" / "linked-dir")
    d = daemons(config)
    (ws / "memory" / "2026-01-03.md").write_text("real file\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-01-03.md"), what="ordinary commit (the FIFO was never opened)")
    skipped = wait_for(lambda: {s["path"]: s["reason"] for s in d.agent("main")["skipped"]}, what="skipped report")
    for name in ("memory/2026-01-01.md", "memory/2026-01-02.md", "memory/linked-dir"):
        assert "outside the workspace" in skipped[name]
    assert d.agent("main")["held_back"] == [], "the secret behind the link was never read"
    tracked = git(ws, "ls-files")
    assert "2026-01-01.md" not in tracked and "linked-dir" not in tracked


_EXHAUST = textwrap.dedent(
    """
    import ctypes, ctypes.util, os, sys
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fds = []
    while True:
        fd = libc.inotify_init1(os.O_CLOEXEC)
        if fd < 0:
            break
        fds.append(fd)
    print(len(fds), ctypes.get_errno(), flush=True)
    sys.stdin.read()  # hold them until the test is done
    """
)


# serial: while the helper holds every inotify instance of this uid, a daemon another worker starts
# would fall back to polling too, and one that exits would free an instance this test's daemon takes.
@pytest.mark.serial
def test_falls_back_to_polling_when_inotify_is_exhausted_and_says_so(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    # Use up this user's inotify instances (max_user_instances) in a helper process.
    hog = subprocess.Popen([sys.executable, "-c", _EXHAUST], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        count, err = map(int, hog.stdout.readline().split())
        assert err == errno.EMFILE, f"expected the instance limit, got errno {err} after {count}"
        d = daemons(config)
        watcher = d.status()["watcher"]
        assert watcher["mode"] == "polling"
        assert "inotify" in watcher["reason"] and "polling" in watcher["reason"]
        assert "polling" in d.log()
    finally:
        hog.stdin.close()
        hog.wait()
    # polling still sees changes
    (ws / "memory" / "2026-11-30.md").write_text("seen by polling\n")
    wait_for(lambda: committed(ws, "A", "memory/2026-11-30.md"), what="commit through polling")


def test_second_daemon_on_the_same_state_is_refused(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    daemons(config)
    second = subprocess.run(
        [sys.executable, "-m", "daemon", "--config", str(config), "run"], capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 1
    assert "already running" in second.stderr
