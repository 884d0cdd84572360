"""A token from the environment or a token file is a secret: whatever it holds, no error shows it.

Before the fix ``MEMSTRATA_TOKEN=$'a\\r\\nX: y' memstrata search …`` answered
``Error: Invalid header value b'Bearer a\\r\\nX: y'``: http.client refused the header and quoted it,
token and all, on the terminal. ``$MEMSTRATA_TOKEN`` and ``.memstrata/token`` are entry points
(docs/threat-model.md: the environment; a workspace file the agent writes). Now both clients, the
CLI's and the skill's, refuse a token no memstrata token could be (printable ASCII) with its length
only; every other token is sent, and a daemon answers it (here a real Unix socket that refuses it,
as the daemon does an unknown token).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from daemon.front.daemon_client import DaemonClient, DaemonRequestError

SKILL = Path(__file__).resolve().parents[2] / "skills" / "mem0-integration" / "mem0_client.py"

TOKENS = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from("\r\n\x00\x1b\x7f\x85 \t\u2028é")),
    min_size=1,
    max_size=200,
).filter(lambda t: t.strip())


def _load_skill():
    spec = importlib.util.spec_from_file_location("mem0_client_under_test", SKILL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def refusing_socket(tmp_path_factory) -> Iterator[Path]:
    """A Unix socket that answers every request 401, as the daemon answers a token it never issued."""
    path = tmp_path_factory.mktemp("sock") / "memstrata.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    body = json.dumps({"error": "a valid token is required"}).encode()
    answer = (
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    server.close()


# what a refusal says whatever the token is: a token that is a part of it ("toke") is not shown by it
REFUSALS = ("a valid token is required",)


def _shown(token: str, text: str) -> bool:
    """The token, or a part of it long enough to matter, in ``text`` (outside the refusal's own words)."""
    for refusal in REFUSALS:
        text = text.replace(refusal, "")
    return len(token.strip()) >= 4 and token.strip() in text


GENERATED = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@GENERATED
@given(token=TOKENS)
def test_the_clis_client_sends_a_token_or_refuses_it_unshown(refusing_socket, token) -> None:
    try:
        client = DaemonClient(refusing_socket, timeout=5, token=token)
    except ValueError as exc:
        assert not _shown(token, str(exc)), "the refusal quotes the token"
        assert "not shown" in str(exc)
        return
    with pytest.raises(DaemonRequestError) as answer:  # sent as it is: the daemon says no
        client.status()
    assert answer.value.status == 401


@GENERATED
@given(token=TOKENS)
@example(token="toke")  # a part of the refusal's own words (make test, stop 56)
def test_the_skills_client_sends_a_token_or_refuses_it_unshown(refusing_socket, token) -> None:
    skill = _load_skill()
    client = skill.Mem0Client("main", token, refusing_socket, timeout=5)
    with pytest.raises(skill.MemstrataError) as exc:
        client.request("GET", "/v1/status")
    assert not _shown(token, str(exc.value)), "the error quotes the token"


def test_the_reported_token_from_the_environment_is_refused_unshown(tmp_path) -> None:
    token = "s3cr3t-part\r\nX-Evil: 1"
    env = {"MEMSTRATA_TOKEN": token, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    config = tmp_path / "memstrata.yaml"
    config.write_text(f"paths:\n  root: {tmp_path / 'root'}\n  state_dir: {tmp_path / 'state'}\n")
    (tmp_path / "root" / "workspace").mkdir(parents=True)
    cli = Path(sys.executable).parent / "memstrata"
    for argv in (
        [str(cli), "--config", str(config), "search", "port", "--agent", "main", "--layer", "conversation"],
        ["/usr/bin/python3", str(SKILL), "--config", str(config), "search", "port", "--agent", "main"],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "s3cr3t" not in done.stdout + done.stderr, done.stderr
        assert "not shown" in done.stderr, done.stderr
