"""Request fields as daemon/api/requests.py defines them, and as each place that spells them out takes them.

The request schemas are the one definition of the fields of an L4 add, update and
search and of an L3 search.  The operations and the broker's signatures spell them
out again (the CLI's options, the MCP tools' parameters and the skill's options are
generated from the operations); the tests compare each of them with the schema,
field by field, by what a caller sees of a field: its kind (text, a whole number,
a flag), whether it is required, its default, its choices and its bounds.

A place may leave a field to the daemon (no default of its own: None, not sent)
and may leave the bounds to it; whatever it does say must be what the schema says.
A field of the schema a place does not take, or a parameter of its own that is no
field, is named with the reason in the test: a field added to the schema and not
to a place (or the other way round) fails until someone decides.

:class:`Recorder` is the other half: a Unix-socket HTTP server in the daemon's
place that keeps every request, so a test sees the body a place really sends and
parses it with the route's schema (the daemon ignores unknown fields, so a field
sent under another name would otherwise be lost without a word).
"""

from __future__ import annotations

import contextlib
import http.server
import inspect
import json
import socketserver
import threading
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

UNSET = "(left to the daemon)"

# A valid value of every field of the compared schemas (a required one is needed to probe the others).
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
        low, high = _clamped(model, name) if kind == "number" else (None, None)
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


# ---------------------------------------------------------------- the places


_KINDS = {str: "text", int: "number", bool: "flag", dict: "object", float: "fraction"}


def signature_fields(fn: Callable) -> dict[str, Field]:
    """A function's parameters (not ``self``); an open ``**kwargs`` cannot be compared, so it is refused."""
    hints = typing.get_type_hints(fn)
    out = {}
    for name, param in inspect.signature(fn).parameters.items():
        assert param.kind is not param.VAR_KEYWORD, f"{fn.__qualname__} takes **{name}: say its fields"
        if name == "self":
            continue
        kinds = [typing.get_origin(k) or k for k in typing.get_args(hints[name]) if k is not type(None)] or [
            hints[name]
        ]
        assert len(kinds) == 1, f"{fn.__qualname__}({name}): {hints[name]}"
        required = param.default is param.empty
        default = UNSET if required or param.default is None else param.default
        out[name] = Field(_KINDS[kinds[0]], required, default)
    return out


# ---------------------------------------------------------------- comparing


def differences(
    place: dict[str, Field],
    schema: dict[str, Field],
    *,
    renamed: dict[str, str] | None = None,
    left_out: dict[str, str] | None = None,
    own: dict[str, str] | None = None,
    says_choices: bool = True,
) -> list[str]:
    """What ``place`` says otherwise than ``schema``; [] when the two agree.

    ``renamed``: the place's name of a field → the schema's; ``left_out``: fields of the schema the
    place does not take, and why; ``own``: parameters of the place that are no field, and why;
    ``says_choices``: the place can state choices (a signature cannot), so it must state the schema's.
    """
    renamed, left_out, own = renamed or {}, left_out or {}, own or {}
    named = {renamed.get(name, name): field for name, field in place.items() if name not in own}
    problems = [f"{name}: taken, but no field of the schema" for name in sorted(set(named) - set(schema))]
    problems += [
        f"{name}: a field of the schema not taken" for name in sorted(set(schema) - set(named) - set(left_out))
    ]
    problems += [f"{name}: taken, yet listed as left out" for name in sorted(set(named) & set(left_out))]
    problems += [f"{name}: listed as its own, yet not taken" for name in sorted(set(own) - set(place))]
    for name in sorted(set(named) & set(schema)):
        mine, theirs = named[name], schema[name]
        if mine.kind != theirs.kind:
            problems.append(f"{name}: {mine.kind}, the schema's is {theirs.kind}")
        if mine.required != theirs.required:
            problems.append(f"{name}: {'required' if mine.required else 'optional'}, not in the schema")
        if mine.default is not UNSET and mine.default != theirs.default:
            problems.append(f"{name}: default {mine.default!r}, the schema's is {theirs.default!r}")
        if says_choices and theirs.choices is not None and mine.choices != theirs.choices:
            problems.append(f"{name}: choices {mine.choices}, the schema's are {theirs.choices}")
        for bound in ("low", "high"):
            if getattr(mine, bound) is not None and getattr(mine, bound) != getattr(theirs, bound):
                problems.append(f"{name}: {bound} {getattr(mine, bound)}, the schema's is {getattr(theirs, bound)}")
    return problems


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
