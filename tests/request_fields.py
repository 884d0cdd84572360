"""Request fields as the routes' schemas (daemon/api/requests.py) take them, and what a place really sends.

:func:`schema_fields` reads a schema's fields as a caller sees them (its kind: text, a whole number, a
flag; whether it is required, its default, its choices and its bounds), by the API's names.

:class:`Recorder` is a Unix-socket HTTP server in the daemon's place that keeps every request, so a test
sees the body a place really sends and parses it with the route's schema (:func:`parsed`; the daemon
ignores unknown fields, so a field sent under another name would otherwise be lost without a word).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

UNSET = "(left to the daemon)"

# A valid value of every field of the schemas, by the API's name (a required one is needed to probe the others).
SAMPLES: dict[str, object] = {
    "agent": "main",
    "text": "qdrant listens on 6333",
    "q": "qdrant port",
    "type": "fact",
    "visibility": "project",
    "project": "infra",
    "expires": "2031-05-01",
    "infer": False,
    "write_id": "w-1",
    "role": "assistant",
    "layer": "core",
    "path": "memory/2026-*",
    "since": "2026-01-01",
    "until": "2026-12-31",
    "mode": "fts",
    "limit": 7,
    "explain": True,
    "fallback": False,
    "user_id": "alice",
    "run_id": "run-1",
    "actor_id": "Alice",
    "metadata": {"category": "movies"},
    "filters": {"user_id": "alice"},
    "threshold": 0.3,
    "max_tokens": 400,
    "min_score": 0.4,
    "show_expired": True,
    "show_superseded": True,
    "supersedes": "0b7c4c57-2b6a-4f7e-9d57-3d0c1e0f8a12",
    "trust": "low",
    "source": "tool_result",
    "trust_min": "medium",
    "memory_id": "0b7c4c57-2b6a-4f7e-9d57-3d0c1e0f8a11",  # no field: the memory an update names in its path
}


@dataclass(frozen=True)
class Field:
    """One field as a caller sees it: ``kind`` is "text", "number", "fraction", "flag" or "object" (JSON)."""

    kind: str
    required: bool = False
    default: object = UNSET
    choices: tuple[str, ...] | None = None
    low: int | None = None
    high: int | None = None


# ---------------------------------------------------------------- the schema


def schema_fields(model: type) -> dict[str, Field]:
    """The fields of a request schema by the name the API gives them (``type``, not ``memory_type``)."""
    schema = model.model_json_schema(by_alias=True)
    required = set(schema.get("required", ()))
    out = {}
    for name, prop in schema["properties"].items():
        forms = [f for f in prop.get("anyOf", [prop]) if f.get("type") != "null"]
        assert len(forms) == 1, f"{model.__name__}.{name}: a field of one kind, or null: {prop}"
        form = forms[0]
        kind = {"string": "text", "integer": "number", "boolean": "flag", "object": "object", "number": "fraction"}[
            form["type"]
        ]
        bounded = "minimum" in form or "maximum" in form  # refused out of them (a 400), not clamped
        low, high = _clamped(model, name) if kind == "number" and not bounded else (None, None)
        out[name] = Field(
            kind=kind,
            required=name in required,
            default=UNSET if prop.get("default") is None else prop["default"],
            choices=tuple(form["enum"]) if "enum" in form else None,
            low=form.get("minimum", low),
            high=form.get("maximum", high),
        )
    return out


def _clamped(model: type, name: str) -> tuple[int | None, int | None]:
    """The bounds a number is taken to when it is out of range, or None where it is taken as sent."""
    required = {k: SAMPLES[k] for k in model.model_json_schema(by_alias=True).get("required", ())}
    low = getattr(model.model_validate({**required, name: -(10**9)}), name)
    high = getattr(model.model_validate({**required, name: 10**9}), name)
    return (None if low == -(10**9) else low), (None if high == 10**9 else high)


# ---------------------------------------------------------------- what a place sends


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    params: dict[str, str]
    body: dict | None


# What the recorder answers: enough of every answer for the callers to show it.
ANSWER = {
    "results": [],
    "layer": "conversation",
    "degraded": False,
    "query": "",
    "queued": False,
    "write_id": "w-1",
    "visibility": "private",
    "project_id": None,
    "memory_type": "fact",
    "expiration_date": None,
    "id": SAMPLES["memory_id"],
    "memory": "qdrant listens on 6333",
    "conversation": {"infer_default": False},
}


class _Handler(http.server.BaseHTTPRequestHandler):
    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        self.server.sent.append(
            Sent(self.command, url.path, dict(parse_qsl(url.query)), json.loads(raw) if raw else None)
        )
        answer = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_POST = do_PUT = do_DELETE = _record

    def address_string(self) -> str:
        return "recorder"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads what was sent, not a log."""


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    sent: list[Sent]


class Recorder:
    """An HTTP server on ``path`` in the daemon's place; :meth:`one` is the one request a call sent."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.server = _Server(str(path), _Handler)
        self.server.sent = []

    def one(self, call: Callable[[], object]) -> Sent:
        self.server.sent.clear()
        call()
        sent = [s for s in self.server.sent if s.path != "/v1/status"]  # a mem0 add asks the daemon's default
        assert len(sent) == 1, sent
        return sent[0]

    @contextlib.contextmanager
    def serving(self) -> Iterator[Recorder]:
        thread = threading.Thread(target=self.server.serve_forever, name="recorder", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            thread.join(5)


def parsed(model: type, sent: Sent) -> dict[str, object]:
    """The fields ``sent`` carries, as ``model`` reads them; every one a field of it (none the daemon would drop)."""
    from daemon.api.requests import parse

    fields = sent.body if sent.body is not None else sent.params
    unknown = set(fields) - set(schema_fields(model))
    assert not unknown, f"{sent.method} {sent.path} sent {sorted(unknown)}: no field of {model.__name__}"
    request = parse(model, fields)
    return {name: value for name, value in request.model_dump(by_alias=True).items() if name in fields}
