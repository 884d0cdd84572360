"""TEST DOUBLE: an OpenAI-compatible chat endpoint on 127.0.0.1 that lets OpenClaw run an agent turn.

No LLM runs on these machines. OpenClaw's gateway needs a model to run a turn, and the plugin's hooks
(auto-recall before the prompt is built, auto-capture when the turn ends) only run inside one. This
server answers ``POST /v1/chat/completions`` (streamed as server-sent events when asked, else one JSON
object) with a fixed reply, and records every request, so a test can read the prompt OpenClaw sent the
model (where auto-recall's block must be) and the reply the turn ended with (what auto-capture stores).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = "Stand-in reply: noted."
USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}


class StandInChat:
    def __init__(self, reply: str = REPLY) -> None:
        self.calls: list[dict] = []
        self.reply = reply
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # /v1/models, asked by some clients before a turn
                self._json({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                owner.calls.append({"path": self.path, "body": body})
                created = int(time.time())
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    base = {"id": "stand-in", "object": "chat.completion.chunk", "created": created}
                    reply = {"role": "assistant", "content": owner.reply}
                    chunks = [
                        {**base, "model": "stand-in", "choices": [{"index": 0, "delta": reply}]},
                        {**base, "model": "stand-in", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                        {**base, "model": "stand-in", "choices": [], "usage": USAGE},
                    ]
                    for chunk in chunks:
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self._json(
                    {
                        "id": "stand-in",
                        "object": "chat.completion",
                        "created": created,
                        "model": "stand-in",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": owner.reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": USAGE,
                    }
                )

            def _json(self, data: dict) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def prompts(self) -> list[str]:
        """Every message text the model was sent, each request's joined."""
        out = []
        for call in self.calls:
            parts = []
            for message in call["body"].get("messages") or []:
                content = message.get("content")
                if isinstance(content, str):
                    parts.append(content)
                elif isinstance(content, list):
                    parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
            out.append("\n".join(parts))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
