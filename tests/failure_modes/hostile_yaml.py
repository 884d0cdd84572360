"""Hostile YAML, built at run time: what a careless operator or a hostile agent can put in a file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

DEEP = 3000  # PyYAML's composer recurses per level: this raised RecursionError (not a YAMLError)


def deep_nesting(good: str) -> str:
    return good + "\nextra: " + "[" * DEEP + "]" * DEEP + "\n"


def alias_bomb(good: str) -> str:
    """9 levels of 9 aliases: 9**9 leaves for anything that walks the composed tree."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 9):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return good + "\n" + "\n".join(lines) + "\n"


def not_utf8(good: str) -> bytes:
    return good.encode() + b"\n# caf\xe9 in latin-1\n"


def oversized(good: str) -> str:
    return good + "\n" + "".join(f"# padding line {i:08d} {'x' * 40}\n" for i in range(6000))  # ~360 KiB


def write_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


# name → (write the hostile version of the file at path, given its good text; what the refusal says)
HOSTILE: dict[str, tuple[Callable[[Path, str], None], str]] = {
    "deep nesting": (lambda p, good: p.write_text(deep_nesting(good)), "nested more than 50 levels deep"),
    "alias bomb": (lambda p, good: p.write_text(alias_bomb(good)), "anchors (&l0) are not accepted"),
    "not UTF-8": (lambda p, good: p.write_bytes(not_utf8(good)), "not valid UTF-8 (byte 0xe9)"),
    "oversized": (lambda p, good: p.write_text(oversized(good)), "the limit is 262,144"),
    "a FIFO": (lambda p, good: write_fifo(p), "not a regular file"),
}


def restore(path: Path, good: str) -> None:
    """Put the good text back (a FIFO is replaced by a regular file)."""
    if path.exists() and not path.is_file():
        path.unlink()
    path.write_text(good)
