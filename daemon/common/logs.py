"""The daemon's log: text or JSON lines on stderr, or journald's native fields under systemd.

Every record passes the never_store patterns first (the message, and a traceback's text): a
secret that reaches a log call is never written, in any form.

The text log escapes every control character a record's values carry (daemon/common/terminal.py):
a file name with ESC/OSC sequences in it is logged as ``\\x1b]0;…``, never as the sequence itself a
``tail`` or ``less -R`` would obey, and a value with a newline cannot start a forged record (its next
lines are indented).  The
message's own line breaks (its format string, a traceback) stay.  The JSON log is exact JSON with
the same characters as ``\\u`` escapes.

Fields: a record about one agent says which (``MEMSTRATA_AGENT=`` under journald, ``"agent"`` in
JSON). The daemon's messages about an agent begin ``"%s: …"`` with the agent's id as the first
argument, so the id is taken from there; a call may also pass ``extra={"agent": …, "event": …}``
(``EVENT=``: a short name a query can select, e.g. ``journalctl EVENT=commit_failed``).

Under systemd (``$JOURNAL_STREAM`` names stderr, and journald's socket exists) records go to
journald through its native protocol: one datagram of ``KEY=value`` lines, a value holding a
newline sent with its length (systemd's journal-native-protocol documentation). A record the
socket refuses (too large, journald gone) is written to stderr instead, so none is lost.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import struct
import sys
import time
from collections.abc import Mapping

from daemon.common.guard import RedactingFilter, SecretGuard
from daemon.common.terminal import escaped, json_text
from layers.common.ids import is_valid_id

JOURNAL_SOCKET = "/run/systemd/journal/socket"
JOURNAL_SOCKET_ENV = "MEMSTRATA_JOURNAL_SOCKET"  # another journald socket (tests bind their own)
IDENTIFIER = "memstrata"

_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


def _redacted(guard: SecretGuard | None, text: str) -> str:
    return guard.redact(text) if guard is not None else text


CONTINUED = "    "  # what a value's own next line starts with in the text log


def _escaped_value(value: object) -> object:
    """A log call's argument as the text log writes it: a string with every control escaped but its line
    breaks, each next line indented (a file name with a newline cannot start a line that reads as a record
    of its own; a multi-line error stays readable); numbers and other objects as they are."""
    if not isinstance(value, str):
        return value
    return escaped(value, keep_newlines=True).replace("\n", "\n" + CONTINUED)


def escaped_message(record: logging.LogRecord) -> str:
    """``record``'s message with its arguments' control characters escaped, its format string's line
    breaks kept; whatever else is left (an exception's text, an object's str) is escaped but its lines."""
    args = record.args
    message: str
    if args:
        try:
            if isinstance(args, Mapping):
                message = str(record.msg) % {k: _escaped_value(v) for k, v in args.items()}
            else:
                message = str(record.msg) % tuple(_escaped_value(v) for v in args)
        except (TypeError, ValueError, KeyError):
            message = record.getMessage()  # as logging itself would fail or format it
    else:
        message = str(record.msg)
    return escaped(message, keep_newlines=True)


class EscapingFormatter(logging.Formatter):
    """A text formatter whose output holds no control character but its own line breaks."""

    def format(self, record: logging.LogRecord) -> str:
        shown = copy.copy(record)  # the other handlers (journald's fallback stream) see the record as logged
        shown.msg, shown.args = escaped_message(record), None
        return escaped(super().format(shown), keep_newlines=True)  # a traceback's lines stay


class AgentField(logging.Filter):
    """Sets ``record.agent`` from a ``"%s: …"`` message whose first argument is an agent id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "agent", None) is None:
            args = record.args
            first = args[0] if isinstance(args, tuple) and args else None
            if isinstance(record.msg, str) and record.msg.startswith("%s: ") and isinstance(first, str):
                record.agent = first if is_valid_id(first) else None
        return True


def _fields(record: logging.LogRecord) -> dict[str, str]:
    """The record's own fields: agent and event, when it has them."""
    out = {}
    for name in ("agent", "event"):
        value = getattr(record, name, None)
        if value:
            out[name] = str(value)
    return out


class JournalFormatter(EscapingFormatter):
    """Text. Under journald's stream (no native socket), prefix ``<N>`` so ``journalctl -p`` works."""

    def __init__(self, journal: bool, guard: SecretGuard | None = None) -> None:
        fmt = "%(levelname)s %(name)s: %(message)s" if journal else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        super().__init__(fmt, datefmt="%H:%M:%S")
        self.journal = journal
        self.guard = guard

    def format(self, record: logging.LogRecord) -> str:
        text = _redacted(self.guard, super().format(record))
        if self.journal:
            prio = _PRIORITY.get(record.levelno, 6)
            text = "\n".join(f"<{prio}>{line}" for line in text.splitlines())
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, agent and event when known,
    and a traceback's text as ``exception``."""

    def __init__(self, guard: SecretGuard | None = None) -> None:
        super().__init__()
        self.guard = guard

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _redacted(self.guard, record.getMessage()),
            **_fields(record),
        }
        if record.exc_info:
            entry["exception"] = _redacted(self.guard, self.formatException(record.exc_info))
        return json_text(entry)


class JournalHandler(logging.Handler):
    """journald's native protocol over its datagram socket; stderr for what it refuses."""

    def __init__(self, path: str, fallback: logging.Handler, guard: SecretGuard | None = None) -> None:
        super().__init__()
        self.path = path
        self.fallback = fallback
        self.guard = guard
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)  # a traceback's text is part of it
            fields = {
                "MESSAGE": _redacted(self.guard, message),
                "PRIORITY": str(_PRIORITY.get(record.levelno, 6)),
                "SYSLOG_IDENTIFIER": IDENTIFIER,
                "LOGGER": record.name,
                "CODE_FILE": record.pathname,
                "CODE_LINE": str(record.lineno),
                "CODE_FUNC": record.funcName,
            }
            extra = _fields(record)
            if "agent" in extra:
                fields["MEMSTRATA_AGENT"] = extra["agent"]
            if "event" in extra:
                fields["EVENT"] = extra["event"]
            self.sock.sendto(encode_fields(fields), self.path)
        except OSError:
            self.fallback.handle(record)  # too large for a datagram, or journald away: the stream keeps it
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        self.sock.close()
        super().close()


def encode_fields(fields: dict[str, str]) -> bytes:
    """journald's native datagram: ``KEY=value\\n``, or ``KEY\\n<64-bit LE length><value>\\n`` for a
    value with a newline in it."""
    out = bytearray()
    for key, value in fields.items():
        data = value.encode("utf-8", errors="replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


def journal_socket() -> str | None:
    """journald's socket when stderr is journald's stream (``$JOURNAL_STREAM`` is its device and
    inode, as systemd sets it) and the socket is there; else None."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    path = os.environ.get(JOURNAL_SOCKET_ENV) or JOURNAL_SOCKET
    try:
        device, inode = (int(part) for part in stream.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError):
        return None
    if (st.st_dev, st.st_ino) != (device, inode) or not os.path.exists(path):
        return None
    return path


def setup_logging(level: str, guard: SecretGuard | None = None, fmt: str = "text") -> None:
    stream = logging.StreamHandler(sys.stderr)
    journald = bool(os.environ.get("JOURNAL_STREAM"))
    stream.setFormatter(JsonFormatter(guard) if fmt == "json" else JournalFormatter(journald, guard))
    native = journal_socket()
    handler: logging.Handler = stream
    if native is not None:
        handler = JournalHandler(native, stream, guard)
        handler.setFormatter(JsonFormatter(guard) if fmt == "json" else EscapingFormatter("%(name)s: %(message)s"))
    for each in {handler, stream}:
        if guard is not None:
            each.addFilter(RedactingFilter(guard))
        each.addFilter(AgentField())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("git", "watchdog", "uvicorn", "uvicorn.error", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
