"""A fresh build's chunking and tokenizing, shared with a helper process so the writer is not alone.

A full build of 20,000 chunks spent ~1.2 s chunking and tokenizing in Python and ~0.6 s writing
SQLite (docs/facts.md, "Index build"); it ran on one of the host's two cores.  Past
:data:`HELPER_FROM_CHARS` of text, :func:`prepared_documents` starts ``python -m
layers.local.storage.build_helper``, which chunks and tokenizes batches of files it is sent on stdin and
answers on stdout, while the writer writes what comes back and prepares every
:data:`OWN_SHARE`-th batch itself.  Documents come out in the order they went in (ids follow that
order: the newest-first ranking relies on it), and are read from the caller's iterable in the
caller's thread.

Nothing is lost to the helper: when it cannot start, exits or answers out of turn, its batches
and every later one are prepared in this process, as a small build always is.  It receives the
text only through its pipe, touches no file, and ends when its stdin closes (when this process
ends, however it ends).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import marshal
import queue
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, NamedTuple, Protocol, TypeVar

from layers.local.text.chunker import Chunk, chunk_markdown
from layers.local.text.tokenizer import token_string

log = logging.getLogger(__name__)

HELPER_FROM_CHARS = 1_000_000  # past this much text a build starts the helper (~0.06 s to start, ~25 MB)
BATCH_CHARS = 200_000  # text per batch sent: large enough that a frame's cost is small, small to keep memory flat
IN_FLIGHT = 3  # batches sent and not yet answered
OWN_SHARE = 4  # the writer prepares every 4th batch itself (its writes took about half the helper's work)
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged pipe (/proc/sys/fs/pipe-max-size)
_LENGTH = struct.Struct("<Q")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds ``layers``


class Text(Protocol):
    """What this module reads of a document: its text.  The index's ``Document``
    (layers/local/storage/index.py) is one; naming it here would make the index and its helper import
    each other."""

    @property
    def text(self) -> str: ...


D = TypeVar("D", bound=Text)


class PreparedChunk(NamedTuple):
    chunk: Chunk
    heading_terms: str  # token_string(chunk.heading)
    body_terms: str  # token_string(chunk.text)


def prepare(text: str) -> list[PreparedChunk]:
    """A file's chunks with the terms the index stores for them."""
    headings: dict[str, str] = {}
    prepared = []
    for chunk in chunk_markdown(text):
        if chunk.heading not in headings:
            headings[chunk.heading] = token_string(chunk.heading)
        prepared.append(PreparedChunk(chunk, headings[chunk.heading], token_string(chunk.text)))
    return prepared


def _write_frame(stream: IO[bytes], value: list) -> None:
    data = marshal.dumps(value)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> object | None:
    """The next value, or None at the end of the stream (or a frame cut short)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    return marshal.loads(data) if len(data) == size else None


class Helper:
    """The helper process, a thread that feeds it and one that takes its answers as they come.

    Both pipes are worked from threads: an answer left in the pipe until the writer came to it
    stopped the helper at the pipe's 64 KB, and the two took turns (1.65 s for the 20,000-chunk
    build, against 1.85 s alone).
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.alive = True
        self._outbox: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        self._inbox: queue.SimpleQueue[object | None] = queue.SimpleQueue()
        self._feeder = threading.Thread(target=self._feed, name="build-helper-feed", daemon=True)
        self._taker = threading.Thread(target=self._take, name="build-helper-take", daemon=True)
        self._feeder.start()
        self._taker.start()

    @classmethod
    def start(cls, command: Sequence[str] | None = None) -> Helper | None:
        """The helper, or None when it cannot be started (the build goes on in this process)."""
        try:
            process = subprocess.Popen(
                list(command or [sys.executable, "-m", "layers.local.storage.build_helper"]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=_PACKAGE_ROOT,
            )
        except OSError as exc:
            log.warning("index build: no helper process (%s): preparing every file here", exc)
            return None
        for pipe in (process.stdin, process.stdout):  # a batch's frame in one write, without waiting on the GIL
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[union-attr]
        return cls(process)

    def _feed(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        while (texts := self._outbox.get()) is not None:
            if not self.alive:
                continue
            try:
                _write_frame(stdin, texts)
            except (OSError, ValueError):
                self.alive = False
        with contextlib.suppress(OSError, ValueError):
            stdin.close()

    def _take(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while (answer := _read_frame(stdout)) is not None:
                self._inbox.put(answer)
        except (OSError, ValueError, EOFError, TypeError) as exc:
            log.warning("index build: the helper's answer was unreadable (%s)", exc)
        self._inbox.put(None)

    def _receive(self, count: int) -> list[list[PreparedChunk]] | None:
        """The answer for the oldest batch sent; None once the helper has failed."""
        if not self.alive:
            return None
        answer = self._inbox.get()
        prepared = None
        if isinstance(answer, list) and len(answer) == count:
            with contextlib.suppress(TypeError, ValueError, IndexError):  # an answer of another shape: not used
                prepared = [[PreparedChunk(Chunk(*row[:4]), row[4], row[5]) for row in doc] for doc in answer]
        if prepared is None:
            log.warning("index build: the helper stopped (exit %s): preparing the rest here", self.process.poll())
            self.alive = False
        return prepared

    def prepare(self, documents: Iterable[D]) -> Iterator[tuple[D, list[PreparedChunk] | None]]:
        """``documents`` in order, each with its prepared chunks (None: the caller prepares it)."""
        waiting: deque[tuple[list[D], bool]] = deque()  # (batch, sent to the helper)
        batches = _batches(documents)
        sent = number = 0
        exhausted = False
        while True:
            while not exhausted and sent < IN_FLIGHT:
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                number += 1
                to_helper = self.alive and number % OWN_SHARE != 0
                if to_helper:
                    self._outbox.put([doc.text for doc in batch])
                    sent += 1
                waiting.append((batch, to_helper))
            if not waiting:
                return
            batch, to_helper = waiting.popleft()
            answer = None
            if to_helper:
                sent -= 1
                answer = self._receive(len(batch))
            for i, doc in enumerate(batch):
                yield doc, (answer[i] if answer is not None else None)

    def close(self) -> None:
        self._outbox.put(None)
        self._feeder.join(timeout=5)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._taker.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _batches(documents: Iterable[D]) -> Iterator[list[D]]:
    batch: list[D] = []
    size = 0
    for doc in documents:
        batch.append(doc)
        size += len(doc.text)
        if size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def prepared_documents(
    documents: Iterable[D], command: Sequence[str] | None = None
) -> Iterator[tuple[D, list[PreparedChunk] | None]]:
    """``documents`` in order, with their chunks prepared by the helper once the build has read
    :data:`HELPER_FROM_CHARS` of text (None: the caller prepares that document itself)."""
    docs = iter(documents)
    read = 0
    for doc in docs:
        if read >= HELPER_FROM_CHARS:
            docs = itertools.chain([doc], docs)
            break
        yield doc, None
        read += len(doc.text)
    else:
        return
    helper = Helper.start(command)
    if helper is None:
        yield from ((doc, None) for doc in docs)
        return
    log.info(
        "index build: past %s characters, helper process %d chunks and tokenizes with this one",
        read,
        helper.process.pid,
    )
    try:
        yield from helper.prepare(docs)
    finally:
        helper.close()


def main() -> None:
    """The helper: frames of texts in on stdin, frames of their prepared chunks out on stdout."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (texts := _read_frame(stdin)) is not None:
        assert isinstance(texts, list)
        answer = [
            [
                (p.chunk.heading, p.chunk.line_start, p.chunk.line_end, p.chunk.text, p.heading_terms, p.body_terms)
                for p in prepare(text)
            ]
            for text in texts
        ]
        _write_frame(stdout, answer)


if __name__ == "__main__":
    main()
