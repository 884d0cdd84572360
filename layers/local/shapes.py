"""What L3 hands out as plain dicts about an index: its statistics, and what a rebuild made.

Defined once, here: :meth:`layers.local.storage.index.LocalIndex.stats` and
:func:`layers.local.storage.index.rebuild` build them, and the daemon's contracts
(daemon/common/contracts.py) extend them with what the daemon adds.  A search's answer
(:class:`protocol.answers.SearchAnswer`) is the protocol's: every client reads it.
Standard library only: the daemon's front imports the contracts, and must not
pay for the index's libraries.
"""

from __future__ import annotations

from typing import TypedDict


class IndexStats(TypedDict, total=False):
    """What an index holds (every key optional: the daemon's index report, which extends it, may know none)."""

    files: int
    chunks: int
    last_indexed: float | None  # time.time() of the newest indexed file; None when it holds none
    pending_embeddings: int  # chunks with embedding work left: their vector, or their items' after it
    pending_items: int  # of those, chunks that have their whole vector and wait for their items'
    vectors: int
    identity: str


class RebuildStats(IndexStats, total=False):
    """What a rebuild made (:func:`layers.local.storage.index.rebuild`): the new index's statistics, and how."""

    files_indexed: int
    vectors_reused: int  # vectors carried over from the old file (chunks whose text did not change)
    seconds: float
