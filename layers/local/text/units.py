"""The passages a chunk is embedded as: the whole chunk, plus each of its items.

Full-text search keeps whole sections (a heading and its body).  One vector
per section is a poor match for a question about one fact in it: the model
reads at most its first tokens (256 here), and a section's vector is the
average of everything it says.  So a section of several items (list items,
paragraphs) is embedded as the whole section *and* as each item, every item
carrying the section's heading path (which holds a daily note's date and
title); a chunk scores as its best passage.  Items shorter than
:data:`MIN_ITEM_CHARS` join the next one, so a stray "- 无" does not become a
vector near every query.

:func:`index_model_id` names what an index's vectors are: the model *and* this
way of cutting chunks (and, for the local model, the companion model joined to
it, :mod:`layers.local.models.companion`), so a change here re-embeds instead of
mixing vectors.
"""

from __future__ import annotations

import re

from layers.local.models import companion

UNITS_VERSION = 1
MIN_ITEM_CHARS = 40
MAX_ITEMS = 16  # a long list beyond this is still covered by the whole chunk's vector
#: Items are embedded, and searched, while an index holds at most this many chunks.  They buy R@5
#: +0.017 / +0.024 / +0.010 on the three dev sets for 2.6x the embedding time and ~6.5 passages per
#: chunk; a search keeps every passage's codes resident (896 bytes with the companion), so 15,000
#: chunks with items are ~87 MB and 100,000 whole chunks ~90 MB, within the memory gate, where
#: 100,000 with items would be ~580 MB (docs/facts.md, "L3 vectors at scale").
ITEMS_UP_TO_CHUNKS = 15_000

_ITEM_START = re.compile(r"^(?:[-*+]|\d+[.)])\s")
_HEADING = re.compile(r"^#{1,6}\s")


def index_model_id(model_id: str) -> str:
    """The embedding identity an index records: the model plus the passage version ("" stays "").

    A local model (``gguf:…``) gets the companion's name too when its package is
    installed: then every stored row holds both vectors (see :func:`has_companion`).
    """
    if not model_id:
        return ""
    joined = f"+{companion.COMPANION_ID}" if model_id.startswith("gguf:") and companion.available() else ""
    return f"{model_id}+units{UNITS_VERSION}{joined}"


def has_companion(embed_model: str) -> bool:
    """The index identity says each stored row is the model's vector followed by the companion's."""
    return embed_model.endswith(f"+{companion.COMPANION_ID}")


def _items(body: str) -> list[str]:
    """Top-level list items (with their continuation lines) and paragraphs; heading lines left out."""
    return [text for text, _, _ in item_spans(body)]


def item_spans(body: str) -> list[tuple[str, int, int]]:
    """(text, first line, last line) of each item :func:`passages` embeds, lines as offsets in ``body``:
    which lines a stored item vector stands for.  An item shorter than :data:`MIN_ITEM_CHARS` joins the
    next one (one left at the end joins the one before)."""
    items: list[list[int]] = []
    current: list[int] = []
    lines = body.splitlines()
    for n, line in enumerate(lines):
        if not line.strip() or _HEADING.match(line):
            if current:
                items.append(current)
            current = []
            continue
        if _ITEM_START.match(line) and current:
            items.append(current)
            current = []
        current.append(n)
    if current:
        items.append(current)
    merged: list[tuple[str, int, int]] = []
    carry: tuple[str, int, int] | None = None  # a short item (text, first, last line), waiting for the next
    for group in items:
        own = "\n".join(lines[i] for i in group)
        text = f"{carry[0]}\n{own}" if carry else own
        first = carry[1] if carry else group[0]
        if len(text) < MIN_ITEM_CHARS:
            carry = text, first, group[-1]
            continue
        merged.append((text, first, group[-1]))
        carry = None
    if carry:
        if merged:
            text, first, _ = merged[-1]
            merged[-1] = (f"{text}\n{carry[0]}", first, carry[2])
        else:
            merged.append(carry)
    return merged


def passages(text: str, items: bool = True) -> list[str]:
    """What to embed for one chunk given as ``heading path`` + newline + chunk text (as the index hands it out).

    The first passage is always ``text`` itself; items follow when there are at least two (and
    ``items``: an index of more than :data:`ITEMS_UP_TO_CHUNKS` chunks embeds whole chunks only).
    """
    if not items:
        return [text]
    heading, _, body = text.partition("\n")
    found = _items(body)
    if len(found) < 2:
        return [text]
    return [text, *(f"{heading}\n{item}" if heading else item for item in found[:MAX_ITEMS])]
