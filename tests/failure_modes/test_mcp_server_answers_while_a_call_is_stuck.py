"""``memstrata mcp`` answered nothing while one tool call waited for a stuck daemon.

Before: the server read a line, ran it to the end and only then read the next.  A
``memory_search`` that reached a daemon which accepted the connection and never
answered held the whole session for the client's timeout (measured: 90 s): no
``ping``, no ``memory_core`` (which needs no daemon), and a ``notifications/cancelled``
was read only afterwards, so the cancelled call was still answered.  Now calls run
beside the line reader: ping, memory_core and the cancellation are handled at once,
and a cancelled call is never answered (the MCP spec's rule).

The stuck daemon is a real Unix socket server on the configured socket that accepts
and never answers; the MCP server is the real ``memstrata mcp`` subprocess, spoken to
in raw JSON lines so that what it writes (and does not write) is seen line by line.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.helpers import REPO_ROOT, init_root
from tests.mcp_session import Cluster, server, with_mcp
from tests.mcp_session import call as sdk_call

BOUND_S = 5.0  # what "answered at once" means on a busy two-core machine
START_S = 60.0  # the server's start (a Python interpreter and the config) and the stuck call's arrival


class StuckDaemon:
    """A Unix socket server that accepts every connection and answers none until :meth:`release`.

    After the release each held connection, and every later one, is closed unanswered: a
    call that was waiting then ends at once (the daemon "went away"), so its answer, if the
    server still meant to send one, would follow promptly.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.accepted = threading.Event()
        self.released = threading.Event()
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed by stop()
                return
            with self.lock:  # a connection is either held (and closed by release) or closed now
                if self.released.is_set():
                    connection.close()
                    continue
                self.held.append(connection)
            self.accepted.set()

    def release(self) -> None:
        with self.lock:
            self.released.set()
            for connection in self.held:
                connection.close()

    def stop(self) -> None:
        self.release()
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() above
        self.listener.close()
        self.thread.join()


class RawSession:
    """``memstrata mcp --agent main`` as a subprocess; every line it writes is parsed into a queue."""

    def __init__(self, config: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "--config", str(config), "mcp", "--agent", "main"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))  # stdout is protocol only: every line is one message
        self.lines.put(None)  # end of output

    def send(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def next_answer(self, timeout: float) -> Any:
        """The next line the server writes, within ``timeout`` seconds."""
        try:
            answer = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s") from None
        assert answer is not None, "the server ended its output"
        return answer

    def close_and_collect(self, timeout: float) -> tuple[list[dict[str, Any]], int]:
        """Close stdin; every further line until the server's output ends, and its exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        rest = []
        try:
            while (answer := self.lines.get(timeout=timeout)) is not None:
                rest.append(answer)
        except queue.Empty:
            raise AssertionError(f"the server did not end its output within {timeout} s of stdin's end") from None
        return rest, self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}


def call(request_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return request(request_id, "tools/call", {"name": tool, "arguments": arguments})


@pytest.fixture
def stuck(tmp_path) -> Iterator[tuple[Path, StuckDaemon]]:
    short = Path(tempfile.mkdtemp(prefix="ms-stuck-", dir="/tmp"))  # AF_UNIX paths are short
    socket_path = short / "memstrata.sock"
    config = init_root(tmp_path, vectors={"backend": "off"}, paths={"socket": str(socket_path)})
    daemon = StuckDaemon(socket_path)
    yield config, daemon
    daemon.stop()
    shutil.rmtree(short)


@contextlib.contextmanager
def initialized(config: Path, version: str) -> Iterator[RawSession]:
    """A raw session past ``initialize`` under protocol ``version``; killed however the test ends."""
    session = RawSession(config)
    try:
        init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        session.send(request(1, "initialize", init))
        assert session.next_answer(START_S)["id"] == 1
        yield session
    finally:
        session.kill()


def test_ping_core_and_cancellation_are_answered_while_a_call_waits_for_a_stuck_daemon(stuck):
    config, daemon = stuck
    with initialized(config, "2025-06-18") as session:
        session.send(notification("notifications/initialized"))

        session.send(call(2, "memory_search", query="what did we decide", fallback=False))
        assert daemon.accepted.wait(START_S), "the call never reached the daemon"

        # The call waits for the daemon; everything else is answered meanwhile, each within the bound.
        session.send(request(3, "ping"))
        assert session.next_answer(BOUND_S) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        session.send(call(4, "memory_core"))
        core = session.next_answer(BOUND_S)
        assert core["id"] == 4 and core["result"]["isError"] is False
        assert "memstrata core bundle" in core["result"]["structuredContent"]["result"]

        session.send(notification("notifications/cancelled", {"requestId": 2, "reason": "the user moved on"}))
        session.send(request(5, "ping"))  # read after the cancellation: its answer says that was handled
        assert session.next_answer(BOUND_S) == {"jsonrpc": "2.0", "id": 5, "result": {}}

        # The daemon goes away: the cancelled call ends now, and would be answered if it were not cancelled.
        daemon.release()
        session.send(call(6, "memory_search", query="and now?", fallback=False))
        refused = session.next_answer(START_S)
        assert refused["id"] == 6 and refused["result"]["isError"] is True, refused
        assert "memstrata daemon" in refused["result"]["content"][0]["text"]

        rest, status = session.close_and_collect(BOUND_S)
        assert rest == [], "the cancelled call was answered"
        assert status == 0


def test_stdin_eof_ends_the_server_promptly_while_a_call_is_stuck(stuck):
    """Shutdown does not wait for the daemon's timeout: the stuck call is given up, unanswered."""
    config, daemon = stuck
    with initialized(config, "2025-06-18") as session:
        session.send(call(2, "memory_search", query="what did we decide", fallback=False))
        assert daemon.accepted.wait(START_S), "the call never reached the daemon"

        rest, status = session.close_and_collect(BOUND_S)
        assert rest == [] and status == 0


def test_a_cancelled_call_in_a_batch_leaves_the_batch_to_the_others(stuck):
    """Under 2025-03-26 (batches): the batch is answered once its last request is, and a cancelled one
    is left out of it instead of holding it until the daemon's timeout."""
    config, daemon = stuck
    with initialized(config, "2025-03-26") as session:
        session.send([call(2, "memory_search", query="what did we decide", fallback=False), request(3, "ping")])
        assert daemon.accepted.wait(START_S), "the call never reached the daemon"

        session.send(request(4, "ping"))  # the batch waits for its stuck call; the session does not
        assert session.next_answer(BOUND_S)["id"] == 4
        session.send(notification("notifications/cancelled", {"requestId": 2}))
        assert session.next_answer(BOUND_S) == [{"jsonrpc": "2.0", "id": 3, "result": {}}]

        daemon.release()
        rest, status = session.close_and_collect(BOUND_S)
        assert rest == [] and status == 0


def test_the_sdk_client_pings_reads_core_and_cancels_while_a_call_is_stuck(stuck, tmp_path):
    """The same through the official MCP SDK client (the compatibility proof): its cancellation of a
    stuck call is taken, and the session goes on."""
    config, daemon = stuck

    async def scenario(client: Client) -> None:
        stuck_call = anyio.CancelScope()

        async def search() -> None:
            with stuck_call:
                await client.call_tool("memory_search", {"query": "what did we decide", "fallback": False})
            assert stuck_call.cancelled_caught, "the stuck call was answered"

        async with anyio.create_task_group() as group:
            group.start_soon(search)
            assert await anyio.to_thread.run_sync(daemon.accepted.wait, START_S), "the call never reached the daemon"
            with anyio.fail_after(BOUND_S):
                await client.send_ping()
                assert "memstrata core bundle" in await sdk_call(client, "memory_core")
            stuck_call.cancel()
        with anyio.fail_after(BOUND_S):
            await client.send_ping()

    with_mcp(server(Cluster(tmp_path, config, None), "main", None), scenario)


def test_past_the_calls_running_at_once_a_call_is_refused_at_once_not_queued(stuck):
    """A stuck daemon holds a thread per call until its timeout: past MAX_CALLS_RUNNING a call is
    answered at once with a tool error saying why, ping still answers, and once the daemon lets go
    every held call is answered and calls run again."""
    from daemon.front.mcp_stdio import MAX_CALLS_RUNNING

    config, daemon = stuck
    with initialized(config, "2025-06-18") as session:
        held = range(100, 100 + MAX_CALLS_RUNNING)
        for n in held:
            session.send(call(n, "memory_search", query=f"question {n}", fallback=False))
        session.send(call(2, "memory_core"))
        refused = session.next_answer(BOUND_S)
        assert refused["id"] == 2 and refused["result"]["isError"] is True, refused
        assert f"{MAX_CALLS_RUNNING} calls of this session are still running" in refused["result"]["content"][0]["text"]
        session.send(request(3, "ping"))
        assert session.next_answer(BOUND_S)["id"] == 3

        assert daemon.accepted.wait(START_S)
        daemon.release()  # connections accepted later are closed at once too
        answered = [session.next_answer(START_S) for _ in held]
        assert sorted(a["id"] for a in answered) == list(held)
        assert all(a["result"]["isError"] and "memstrata daemon" in a["result"]["content"][0]["text"] for a in answered)
        session.send(call(4, "memory_core"))
        assert session.next_answer(BOUND_S)["result"]["isError"] is False
        rest, status = session.close_and_collect(BOUND_S)
        assert rest == [] and status == 0
