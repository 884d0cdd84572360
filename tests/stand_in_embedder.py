"""TEST DOUBLE: an OpenAI-compatible ``POST /v1/embeddings`` endpoint on 127.0.0.1.

The seed's gateway (OneAPI ``text-embedding-v4`` behind Tailscale) cannot run here, and the
real llama.cpp model embeds ~50 texts/s on these two cores, which would make a 10,000-write
replay a test of the model.  This server speaks the same protocol the daemon's
``vectors.backend: openai`` client uses (bearer key, ``model``, ``dimensions``) and answers
with deterministic unit vectors derived from each text's hash, so equal texts get equal
vectors.  Used by the replay failure-mode tests and, labelled as such, by the benchmark.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import yaml

KEY_ENV = "MEMSTRATA_TEST_EMBED_KEY"
KEY = "stand-in-embedding-key"
DIM = 64


def vector_of(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    v = np.random.default_rng(seed).normal(size=dim)
    return (v / np.linalg.norm(v)).tolist()


class StandInEmbedder:
    """The server; ``calls`` counts requests and ``texts`` the texts embedded.  ``delay_s``: how long
    each request takes, at least (the real model takes seconds for a batch on a busy host: files
    change while their chunks are being embedded)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls = 0
        self.texts = 0
        self.delay_s = delay_s
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/embeddings" or self.headers.get("Authorization") != f"Bearer {KEY}":
                    self.send_response(401)
                    self.end_headers()
                    return
                owner.calls += 1
                time.sleep(owner.delay_s)
                owner.texts += len(body["input"])
                dim = body.get("dimensions", DIM)
                data = [{"index": i, "embedding": vector_of(t, dim)} for i, t in enumerate(body["input"])]
                payload = json.dumps({"data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def configure(self, config: Path, dim: int = DIM) -> dict:
        """Point the daemon's embedder at this server (``dim``-wide vectors); returns the environment the
        daemon needs."""
        data = yaml.safe_load(config.read_text())
        data.setdefault("vectors", {}).update(
            backend="openai", openai={"base_url": self.url, "model": "stand-in", "dim": dim, "api_key_env": KEY_ENV}
        )
        config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        return {KEY_ENV: KEY}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
