"""Text for a terminal or a text log: every control character written as an escape, never sent raw.

Names, paths, memory text and metadata come from agents, and an agent can be wrong or hostile.  A
file named ``memory/x\\x1b]0;PWNED\\x07.md`` held back for a secret reached ``memstrata status`` as it
was: the operator's terminal obeyed it (an OSC 0 sets the window title, an OSC 52 writes the
clipboard, a CSI moves the cursor and can paint over the lines above), and the text log kept every
ESC for the next ``less -R`` or ``tail``.  So whatever the front prints as text, and whatever the
daemon writes to its text log, goes through :func:`escaped` first:

- bytes that are not UTF-8 are written ``\\xNN`` (layers/common/names.py ``shown``, as status, search and
  commit messages already spelled them);
- C0 controls (``\\x00``-``\\x1f``, tab and newline too: a name must not start a forged line), DEL and
  the C1 controls (``\\x80``-``\\x9f``: ``\\x9b`` is a CSI on terminals that read 8-bit controls) are
  written ``\\xNN``;
- the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), the marks U+200E/U+200F
  and U+061C, and the line and paragraph separators U+2028/U+2029 are written ``\\uNNNN``: they
  reorder or break what is shown (``evil\\u202egpj.md`` reads as ``evil`` + ``dm.jpg``).

:func:`escaped` keeps newlines only where the text is ours to break (``keep_newlines``: a traceback,
a multi-line block the front renders).  :func:`for_terminal` applies it to every string of a
document (keys too) before a text rendering, so one call covers every field a renderer may pick.
JSON output stays exact JSON: :func:`json_text` writes the same characters as ``\\uNNNN`` escapes, a
parser reads back the very same value.
"""

from __future__ import annotations

import json
import re
from typing import Any

from layers.common.names import json_safe, shown

#: Characters a terminal obeys or that reorder or break a line: C0, DEL, C1, bidi controls, separators.
_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"  # DEL, C1, bidi, separators
UNSAFE = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_UNSAFE_KEEPING_NEWLINES = re.compile(f"[\x00-\x09\x0b-\x1f{_BEYOND_C0}]")
#: What json.dumps(ensure_ascii=False) leaves raw (it escapes C0 itself).
_JSON_RAW = re.compile(f"[{_BEYOND_C0}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escaped(text: str, keep_newlines: bool = False) -> str:
    """``text`` with undecodable bytes and every control character (see the module) written as escapes.

    ``keep_newlines``: ``\\n`` stays a line break (text whose lines are ours); every other control,
    carriage return included, is still escaped.  Clean text comes back unchanged.
    """
    text = shown(text)
    pattern = _UNSAFE_KEEPING_NEWLINES if keep_newlines else UNSAFE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def for_terminal(value: Any, keep_newlines: bool = False) -> Any:
    """``value`` (a document: dicts, lists, strings, numbers) with every string :func:`escaped`, keys too."""
    if isinstance(value, str):
        return escaped(value, keep_newlines)
    if isinstance(value, dict):
        return {for_terminal(k, keep_newlines): for_terminal(v, keep_newlines) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [for_terminal(v, keep_newlines) for v in value]
    return value


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_json_controls(text: str) -> str:
    """JSON text with the controls ``json.dumps(ensure_ascii=False)`` leaves raw written as ``\\uNNNN``: the
    same value, read back exactly (only strings can hold them: outside, JSON is ASCII)."""
    return _JSON_RAW.sub(_json_escape, text) if _JSON_RAW.search(text) else text


def json_text(data: object, indent: int | None = None) -> str:
    """``data`` as JSON that a terminal can show: non-ASCII text stays readable, every control and bidi
    character is a ``\\uNNNN`` escape (JSON's own spelling, so the value read back is exact).

    Outside strings JSON has only ASCII punctuation, digits and words, so an escape can only land
    inside a string.  A name with undecodable bytes is spelled as everywhere else (``bad\\xffname.md``,
    layers/common/names.py ``json_safe``): UTF-8 output cannot hold a lone surrogate.
    """
    return escape_json_controls(json.dumps(json_safe(data), ensure_ascii=False, indent=indent))
