"""Values the daemon repeats back (errors) or writes down (the audit log): short, and never a secret.

A refused request's values are the caller's, and the caller may be hostile: a
5 MB ``project`` echoed into the error and the audit log cost 10 MB of log per
request, and an API key sent as ``project`` landed in the audit log as it was.
Everything echoed goes through here: strings are cut to
:data:`~daemon.common.daemon_limits.MAX_ECHO_CHARS` (saying how long they were), containers
to a few items and levels, and what is left through the never_store patterns.
Redaction runs on a window a little longer than what is kept, so a secret cut
in half by the limit is still recognised whole and redacted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from daemon.common.daemon_limits import MAX_ECHO_CHARS

Redact = Callable[[str], str]

MAX_ITEMS = 16  # of a list or an object, in the audit log
MAX_LEVELS = 3
_REDACT_WINDOW = 8192  # a PEM private key (the longest secret the patterns know) fits whole


def _plain(text: str) -> str:
    return text


def cut(text: str, redact: Redact = _plain, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` redacted and cut to ``limit`` characters; a cut says how long the text was."""
    window = redact(text[: limit + _REDACT_WINDOW])
    if len(text) <= limit and len(window) <= limit:
        return window
    kept = window[:limit]
    # a redaction marker cut in half would read as text: keep it whole or not at all
    opened = kept.rfind("[redacted ")
    if opened >= 0 and "]" not in kept[opened:]:
        kept = kept[:opened]
    return f"{kept}… ({len(text):,} characters)"


def shown(value: object, redact: Redact = _plain) -> str:
    """``value`` as an error message quotes it: ``'text'`` for a string (cut), its type otherwise."""
    if isinstance(value, str):
        return repr(cut(value, redact))
    if value is None or isinstance(value, (bool, int, float)):
        return cut(repr(value), redact)
    names: dict[type, str] = {dict: "an object", list: "a list"}
    return names.get(type(value), type(value).__name__)


def capped(value: object, redact: Redact = _plain, level: int = 0) -> object:
    """``value`` as the audit log keeps it: JSON types only, strings cut, containers bounded."""
    if isinstance(value, str):
        return cut(value, redact)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Mapping):
        if level >= MAX_LEVELS:
            return f"(an object of {len(value):,} keys)"
        items = list(value.items())
        out = {cut(str(k), redact): capped(v, redact, level + 1) for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            out["…"] = f"{len(items) - MAX_ITEMS:,} more keys"
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
        if level >= MAX_LEVELS:
            return f"(a list of {len(items):,} items)"
        out_list = [capped(v, redact, level + 1) for v in items[:MAX_ITEMS]]
        if len(items) > MAX_ITEMS:
            out_list.append(f"… {len(items) - MAX_ITEMS:,} more items")
        return out_list
    return cut(str(value), redact)
