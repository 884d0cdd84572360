"""TEST DOUBLE: an OpenAI-compatible ``POST /v1/chat/completions`` endpoint on 127.0.0.1.

No LLM can run on these machines; this server speaks the protocol consolidation's judge uses
(layers/conversation/consolidation/judge.py) and answers its two questions by fixed rules, so a test can say
what a good answer is and check what is done with it:

- "which statements are outdated": every statement but the newest is replaced by the newest when
  all of them share the marker the test gives (``same_subject``), else none is outdated;
- "summarise these task logs": ``"SUMMARY: "`` and the entries joined by " / ".

Every request is recorded (``calls``: path, bearer token, body).  ``answer`` may be replaced to
send something else (not JSON, an index out of range) for the error paths.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandInLLM:
    def __init__(self, same_subject: str = "端口") -> None:
        self.calls: list[dict] = []
        self.same_subject = same_subject
        self.answer: Callable[[str], str] = self.rules
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.calls.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                prompt = body["messages"][-1]["content"]
                reply = {
                    "id": "stand-in",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": owner.answer(prompt)},
                        }
                    ],
                }
                data = json.dumps(reply, ensure_ascii=False).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rules(self, prompt: str) -> str:
        if "OUTDATED" in prompt:
            listed = re.findall(r"^\[(\d+)\] \(([^)]*)\) (.*)$", prompt, re.MULTILINE)
            if not listed or not all(self.same_subject in text for _, _, text in listed):
                return json.dumps({"outdated": []})
            newest = max(listed, key=lambda item: item[1])
            outdated = [{"index": int(i), "replaced_by": int(newest[0])} for i, _, _ in listed if i != newest[0]]
            return "```json\n" + json.dumps({"outdated": outdated}) + "\n```"
        entries = re.findall(r"^- \([^)]*\) (.*)$", prompt, re.MULTILINE)
        return json.dumps({"summary": "SUMMARY: " + " / ".join(sorted(entries))}, ensure_ascii=False)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
