"""The OpenAI-compatible embedder against a local stand-in server.

TEST DOUBLE: the seed's endpoint (OneAPI's text-embedding-v4 behind Tailscale)
cannot run here, so a small HTTP server on 127.0.0.1 speaks the same
``POST /embeddings`` protocol.  It checks what a real gateway would (the bearer
key, the model, the dimensions) and answers with deterministic vectors.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest

from layers.local.models.vectors import OpenAIEmbedder, VectorsUnavailableError

KEY = "test-gateway-key"


class _Gateway(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict]] = []

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Gateway.seen.append({"auth": self.headers.get("Authorization"), **body})
        if self.path != "/v1/embeddings" or self.headers.get("Authorization") != f"Bearer {KEY}":
            self.send_response(401)
            self.end_headers()
            return
        dim = 4 if body["model"] == "fixed-4d" else body.get("dimensions", 8)  # a model that ignores `dimensions`
        data = [
            {"index": i, "embedding": [float(len(text) + j) for j in range(dim)]}
            for i, text in enumerate(body["input"])
        ]
        payload = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def gateway():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Gateway.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_embeds_in_order_normalised_with_the_key_from_the_environment(gateway, monkeypatch):
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    embedder = OpenAIEmbedder(gateway, "text-embedding-v4", 8, "TEST_EMBED_KEY")
    vectors = embedder.embed_passages(["a", "bbbb"])
    assert vectors.shape == (2, 8)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.arange(8) + 4.0
    assert np.allclose(vectors[1], expected / np.linalg.norm(expected)), "answers are put back in input order"
    assert _Gateway.seen[-1]["model"] == "text-embedding-v4" and _Gateway.seen[-1]["dimensions"] == 8
    assert embedder.model_id == "openai:text-embedding-v4:8"


def test_missing_key_wrong_key_and_wrong_dimension_are_reasons_not_crashes(gateway, monkeypatch):
    monkeypatch.delenv("TEST_EMBED_KEY", raising=False)
    embedder = OpenAIEmbedder(gateway, "m", 8, "TEST_EMBED_KEY")
    with pytest.raises(VectorsUnavailableError, match="TEST_EMBED_KEY"):
        embedder.embed_query("x")
    monkeypatch.setenv("TEST_EMBED_KEY", "wrong")
    with pytest.raises(VectorsUnavailableError, match="failed: HTTPStatusError") as info:
        embedder.embed_query("x")
    assert "wrong" not in str(info.value), "the key is never echoed"
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    with pytest.raises(VectorsUnavailableError, match="4-d vectors, configured dim is 8"):
        OpenAIEmbedder(gateway, "fixed-4d", 8, "TEST_EMBED_KEY").embed_query("x")


def test_unreachable_endpoint_is_a_reason(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    embedder = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", 8, "TEST_EMBED_KEY", timeout_s=2)
    with pytest.raises(VectorsUnavailableError, match="ConnectError"):
        embedder.embed_passages(["x"])
