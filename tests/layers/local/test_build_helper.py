"""A fresh build shares its chunking and tokenizing with a helper process (a real subprocess here):
the index is the same whichever process prepared a file, and a helper that fails loses nothing."""

from __future__ import annotations

import hashlib
import sys

import apsw
import pytest

from layers.local.storage import build_helper
from layers.local.storage.build_helper import Helper, prepared_documents
from layers.local.storage.index import Document, Identity, rebuild
from tests.corpus import Corpus


def _documents(count: int = 60) -> list[Document]:
    corpus = Corpus(seed=4)
    docs = []
    for n in range(count):
        text = "\n".join(f"## {corpus.word()} {corpus.chinese(3)}\n\n{corpus.chunk(300)} 端口 {n}\n" for _ in range(8))
        docs.append(Document(f"memory/2026-01-{n:03d}.md", text, hashlib.sha256(text.encode()).hexdigest(), "daily"))
    return docs


def _contents(path) -> tuple[list, list]:
    """Every chunk row but its time, and every term instance FTS5 holds (fts5vocab reads a contentless table)."""
    db = apsw.Connection(str(path))
    db.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, chunks_fts, instance)")
    chunks = db.execute("SELECT id, path, seq, heading, line_start, line_end, hash, text FROM chunks ORDER BY id")
    terms = db.execute("SELECT term, doc, col, offset FROM temp.v ORDER BY doc, col, offset")
    contents = (chunks.fetchall(), terms.fetchall())
    db.close()
    return contents


WRONG_SHAPE = """
import marshal, struct, sys
stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
while len(head := stdin.read(8)) == 8:
    texts = marshal.loads(stdin.read(struct.unpack("<Q", head)[0]))
    data = marshal.dumps([[("x",)]] * len(texts))
    stdout.write(struct.pack("<Q", len(data)) + data)
    stdout.flush()
"""


@pytest.fixture
def small_batches(monkeypatch):
    """The helper from the first file, in batches of a few files, so both processes prepare some."""
    monkeypatch.setattr(build_helper, "HELPER_FROM_CHARS", 0)
    monkeypatch.setattr(build_helper, "BATCH_CHARS", 2_000)


def test_a_build_with_the_helper_is_the_build_without_it(tmp_path, monkeypatch, small_batches):
    docs = _documents()
    sources = []
    real_receive = Helper._receive

    def counting(self, count):
        answer = real_receive(self, count)
        sources.append(answer is not None)
        return answer

    monkeypatch.setattr(Helper, "_receive", counting)
    rebuild(tmp_path / "helped.sqlite", Identity(), docs)
    assert sources and all(sources), "every batch sent was answered by the helper"
    monkeypatch.setattr(build_helper, "HELPER_FROM_CHARS", 10**12)
    rebuild(tmp_path / "alone.sqlite", Identity(), docs)
    helped, alone = _contents(tmp_path / "helped.sqlite"), _contents(tmp_path / "alone.sqlite")
    assert len(helped[0]) == len(alone[0]) > 400
    assert helped == alone


@pytest.mark.parametrize(
    "command",
    [
        ["/nonexistent/python"],  # cannot start
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(8)"],  # exits before answering
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'\\x05' + bytes(7) + b'junk!')"],  # answers junk
        [sys.executable, "-c", WRONG_SHAPE],  # answers each batch in time, with rows of another shape
    ],
)
def test_a_helper_that_fails_loses_no_file(tmp_path, small_batches, command):
    docs = _documents(20)
    seen = list(prepared_documents(docs, command))
    assert [doc.path for doc, _ in seen] == [doc.path for doc in docs]
    assert all(prepared is None for _, prepared in seen)  # each prepared by the build's own process


def test_a_helper_killed_mid_build_hands_the_rest_back_in_order(small_batches):
    docs = _documents(40)
    helper = Helper.start()
    assert helper is not None
    seen = []
    try:
        for doc, prepared in helper.prepare(docs):
            seen.append((doc.path, prepared is not None))
            if len(seen) == 3:
                helper.process.kill()
    finally:
        helper.close()
    assert [path for path, _ in seen] == [doc.path for doc in docs]
    assert seen[0][1], "the first batch came from the helper"
    assert not seen[-1][1], "after the kill the build prepared the rest itself"
    assert helper.process.returncode is not None
