"""User queries → safe FTS5 expressions, and highlighted snippets for the hits.

Nothing a user types reaches FTS5's query language: every whitespace-separated
term is reduced to index tokens (letters, digits, CJK characters — never a quote,
``*``, ``:`` or parenthesis) and written as a quoted phrase.  ``NEAR(`` becomes the
word ``near``; ``a:b`` two words; a lone ``"`` nothing at all.  A query can
therefore never raise an SQL or FTS error.
"""

from __future__ import annotations

from dataclasses import dataclass

from layers.local.tokenizer import token_spans, tokens

MAX_TERMS = 32  # a pasted 10 KB paragraph is still a query, not a denial of service
SNIPPET_CHARS = 240


class EmptyQueryError(ValueError):
    """The query has nothing searchable in it."""


@dataclass(frozen=True)
class Query:
    text: str
    phrases: tuple[str, ...]  # each a space-joined token sequence
    truncated: bool = False

    @property
    def all_terms(self) -> str:
        """Every term must match (each as a phrase)."""
        return " AND ".join(f'"{p}"' for p in self.phrases)

    @property
    def any_term(self) -> str:
        """At least one term must match: the relaxed retry."""
        return " OR ".join(f'"{p}"' for p in self.phrases)

    @property
    def token_set(self) -> frozenset[str]:
        return frozenset(t for p in self.phrases for t in p.split(" "))


def parse_query(text: str) -> Query:
    """Turn what a user typed into phrases; :class:`EmptyQueryError` when nothing is left."""
    phrases: list[str] = []
    for term in text.split():
        toks = tokens(term)
        if toks:
            phrase = " ".join(toks)
            if phrase not in phrases:
                phrases.append(phrase)
    if not phrases:
        raise EmptyQueryError(
            "nothing to search for: the query needs letters, digits or CJK characters (punctuation is ignored)"
        )
    return Query(text, tuple(phrases[:MAX_TERMS]), truncated=len(phrases) > MAX_TERMS)


def highlight(text: str, wanted: frozenset[str], width: int = SNIPPET_CHARS) -> str:
    """The window of ``text`` with the most query tokens, matches wrapped in ``**``."""
    spans: list[tuple[int, int]] = []
    for start, end, token in token_spans(text):
        if token not in wanted:
            continue
        if spans and spans[-1][1] == start:  # 端口: one highlight, not two
            spans[-1] = (spans[-1][0], end)
        elif not spans or spans[-1] != (start, end):
            spans.append((start, end))
    if not spans:
        snippet = text[:width]
        return snippet.strip() + ("…" if len(text) > width else "")
    best_start, best_count = spans[0][0], 0
    j = 0
    for i, (start, _end) in enumerate(spans):
        while j < len(spans) and spans[j][1] <= start + width:
            j += 1
        if j - i > best_count:
            best_start, best_count = start, j - i
    begin = max(0, best_start - width // 4)
    begin = text.rfind("\n", 0, best_start) + 1 if best_start - begin > width // 4 else begin
    end = min(len(text), begin + width)
    out, pos = [], begin
    for start, stop in spans:
        if start < begin or stop > end:
            continue
        out.append(text[pos:start])
        out.append(f"**{text[start:stop]}**")
        pos = stop
    out.append(text[pos:end])
    snippet = "".join(out).strip()
    return ("…" if begin > 0 else "") + snippet + ("…" if end < len(text) else "")
