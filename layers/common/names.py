"""File names as text that can always be encoded, shown the way Python's repr shows bytes.

On Linux a file name is bytes.  Python hands names that are not UTF-8 over as
``str`` with lone surrogates (PEP 383, ``surrogateescape``): ``b"bad\\xffname.md"``
becomes ``"bad\\udcffname.md"``.  That string opens the right file and goes to git
unchanged (``os.fsencode`` restores the bytes), but it cannot be encoded as UTF-8:
JSON answers, SQLite text, commit messages and terminals refuse it.

So names stay surrogate-escaped wherever they address a file, and become
:func:`shown` (``bad\\xffname.md``, plain ASCII escapes) wherever they are
stored as text or displayed: one bad name then costs only its own file a
slightly odd spelling instead of breaking every answer that lists it.
"""

from __future__ import annotations

from typing import Any


def is_clean(name: str) -> bool:
    """True when ``name`` encodes as UTF-8 (the everyday case, checked cheaply)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: str) -> str:
    """``name`` with every undecodable byte written ``\\xNN``; clean names come back unchanged.

    Not reversible for a name that itself contains the four characters ``\\xff``;
    such names exist only to confuse, and then collide only with one another.
    """
    if is_clean(name):
        return name
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file system produced: escape it as a code point
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def json_safe(value: Any) -> Any:
    """``value`` with every string (keys included) made encodable by :func:`shown`."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {json_safe(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
