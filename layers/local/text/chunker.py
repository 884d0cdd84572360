"""Markdown → chunks that respect the document's structure.

A chunk never starts in the middle of a section: headings open new chunks, and
each chunk remembers its heading path (``Deploy > Qdrant``) so search can weight
headings and show where a hit sits.  Long sections split at blank lines once past
a soft limit, never inside a code fence; only a single block longer than the
hard cap is cut, and a cut fence is closed and reopened so every piece is still
valid markdown.

A section that is nothing but its heading (a daily note's ``# 2026-09-08 星期二``
right above its first ``##``) is not a chunk of its own: it joins the section
below it.  On its own such a chunk matched every question that names its date
and, being tiny, sat near every query in vector space, pushing out the body
that answers the question.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

CHUNKER_VERSION = 2
SOFT_LIMIT = 1000
HARD_LIMIT = 2000

_HEADING_RE = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE_RE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Chunk:
    heading: str  # "H1 > H2", "" before the first heading
    line_start: int  # 1-based, inclusive
    line_end: int
    text: str

    @property
    def hash(self) -> str:
        """Identity of the chunk's content (heading path included: it is indexed too)."""
        return hashlib.sha256(f"{self.heading}\n{self.text}".encode()).hexdigest()


class _Builder:
    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.lines: list[str] = []
        self.start = 1
        self.size = 0
        self.heading = ""

    def add(self, line: str, number: int) -> None:
        if not self.lines:
            self.start = number
        self.lines.append(line)
        self.size += len(line)

    def flush(self, end: int) -> None:
        text = "".join(self.lines)
        if text.strip():
            self.chunks.append(Chunk(self.heading, self.start, end, text.rstrip("\n") + "\n"))
        self.lines, self.size = [], 0


def _split_long_line(line: str) -> list[str]:
    step = HARD_LIMIT - 1  # room for the newline a chunk ends with
    return [line[i : i + step] for i in range(0, len(line), step)] or [line]


def _fence_size(lines: list[str], start: int) -> int:
    """Characters from the fence opening at ``lines[start]`` to its closing line (or the end)."""
    marker = _FENCE_RE.match(lines[start]).group(1)  # type: ignore[union-attr]
    size = len(lines[start])
    for line in lines[start + 1 :]:
        size += len(line)
        closing = _FENCE_RE.match(line)
        if closing and closing.group(1)[0] == marker[0] and len(closing.group(1)) >= len(marker):
            break
    return size


_HEADING_LINE_RE = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$", re.MULTILINE)
_ODD_BREAKS = re.compile("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # line breaks str.splitlines knows


def _quick_chunks(text: str) -> list[Chunk] | None:
    """The common case without the line-by-line walk: no fences, every section short.

    Sections are sliced at heading lines found by one regex pass; anything the
    fast path cannot decide (fences, long sections, unusual line breaks) returns
    None and goes through :func:`_walk`, which produces the same chunks.
    """
    if "```" in text or "~~~" in text or _ODD_BREAKS.search(text):
        return None
    headings = list(_HEADING_LINE_RE.finditer(text))
    bounds = [0, *(m.start() for m in headings), len(text)]
    if any(bounds[i + 1] - bounds[i] > SOFT_LIMIT for i in range(len(bounds) - 1)):
        return None
    chunks: list[Chunk] = []
    stack: list[tuple[int, str]] = []
    heading = ""
    line = 1
    for i in range(len(bounds) - 1):
        if i > 0:
            match = headings[i - 1]
            level = len(match.group(1))
            stack = [(lvl, title) for lvl, title in stack if lvl < level] + [(level, match.group(2).strip())]
            heading = " > ".join(title for _, title in stack)
        section = text[bounds[i] : bounds[i + 1]]
        lines = section.count("\n") + (0 if section.endswith("\n") or not section else 1)
        if section.strip():
            chunks.append(Chunk(heading, line, line + lines - 1, section.rstrip("\n") + "\n"))
        line += lines
    return chunks


def chunk_markdown(text: str) -> list[Chunk]:
    """Split ``text`` into chunks of about :data:`SOFT_LIMIT` characters, at most :data:`HARD_LIMIT`."""
    quick = _quick_chunks(text)
    return _join_bare_headings(quick if quick is not None else _walk(text))


# A line that starts with neither "#" nor a blank: a chunk with one has more than headings (one C
# pass; the line-by-line check below runs only for chunks without such a line).
_CONTENT_LINE = re.compile(r"^[ \t]*[^#\s]", re.MULTILINE)


def _is_bare_heading(chunk: Chunk) -> bool:
    if _CONTENT_LINE.search(chunk.text):
        return False
    return all(not line.strip() or _HEADING_RE.match(line) for line in chunk.text.splitlines())


def _join_bare_headings(chunks: list[Chunk]) -> list[Chunk]:
    """Fold a heading-only chunk into the next one when that one is its subsection and both fit."""
    out: list[Chunk] = []
    pending: Chunk | None = None
    for chunk in chunks:
        if pending is not None:
            joined = pending.text + "\n" + chunk.text
            if chunk.heading.startswith(pending.heading + " > ") and len(joined) <= HARD_LIMIT:
                chunk = Chunk(chunk.heading, pending.line_start, chunk.line_end, joined)
            else:
                out.append(pending)
            pending = None
        if _is_bare_heading(chunk) and chunk.heading:
            pending = chunk
        else:
            out.append(chunk)
    if pending is not None:
        out.append(pending)
    return out


def _walk(text: str) -> list[Chunk]:
    """The general chunker: line by line, tracking fences and sizes."""
    out = _Builder()
    stack: list[tuple[int, str]] = []
    fence: str | None = None  # the opening marker while inside a fence
    fence_open_line = ""
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        stripped = line.rstrip("\n")
        marker = stripped.lstrip(" ")[:1]  # only these can open a fence or a heading
        fence_match = _FENCE_RE.match(stripped) if marker in ("`", "~") else None
        if fence is None and not fence_match:
            heading = _HEADING_RE.match(stripped) if marker == "#" else None
            if heading:
                out.flush(number - 1)
                level = len(heading.group(1))
                stack = [(lvl, title) for lvl, title in stack if lvl < level] + [(level, heading.group(2).strip())]
                out.heading = " > ".join(title for _, title in stack)
            elif not stripped.strip() and out.size >= SOFT_LIMIT:
                out.flush(number - 1)
                continue
        if fence_match and fence is None and out.lines and out.size + _fence_size(lines, number - 1) > HARD_LIMIT:
            out.flush(number - 1)  # a code block that would not fit starts a chunk of its own
        for piece in _split_long_line(line) if len(line) > HARD_LIMIT else [line]:
            reserve = len(fence) + 1 if fence is not None else 0
            if out.size + len(piece) + reserve > HARD_LIMIT and out.lines:
                if fence is not None:  # cut inside a fence: close it here, reopen in the next chunk
                    out.lines.append(fence + "\n")
                    out.flush(number - 1 if piece is line else number)
                    out.add(fence_open_line, number)
                else:
                    out.flush(number - 1 if piece is line else number)
            out.add(piece, number)
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence, fence_open_line = marker, line if line.endswith("\n") else line + "\n"
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not stripped.strip()[len(marker) :].strip():
                fence = None
    out.flush(len(lines))
    return out.chunks
