"""User queries → safe FTS5 expressions, and highlighted snippets for the hits.

Nothing a user types reaches FTS5's query language: every whitespace-separated
term is reduced to index tokens (letters, digits, CJK characters — never a quote,
``*``, ``:`` or parenthesis) and written as a quoted phrase.  ``NEAR(`` becomes the
word ``near``; ``a:b`` two words; a lone ``"`` nothing at all.  A query can
therefore never raise an SQL or FTS error.

An agent asks questions, not keyword lists: question words and particles
(what / which / did / we, 什么 / 哪个 / 怎么 / 吗 / 呢) do not have to match, so
they are left out of the lexical expressions (a query made only of them still
searches for them).  When no chunk has every remaining term, the relaxed retry
ORs the content words, and a Chinese run — which the index holds one character
per token, and which a question rarely shares verbatim with a note — is tried
as its overlapping two-character phrases (备份 负责 …), never as single
characters: a question's common characters match everything and rank noise.
BM25 weights each of them by how rare it is in the index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from layers.local.text.tokenizer import CJK_CLASS, stem, terms, token_spans, tokens

MAX_TERMS = 32  # a pasted 10 KB paragraph is still a query, not a denial of service
SNIPPET_CHARS = 240

# Words a question is made of rather than what it is about.
_EN = """
a about after again all also am an and any are as at be been before being but by can could did do does
doing done during each for from had has have having he her here him his how i if in into is it its me my
no nor not now of off on once only or our ours out over own she should so some such than that the their
them then there these they this those through to too under until up very was we were what when where which
while who whom whose why will with would you your current currently latest newest recent recently
"""
# Chinese question words and particles (matched greedily inside a run, longest first).
_ZH = """
什么 为什么 为啥 怎么 怎么样 怎样 如何 哪个 哪些 哪里 哪儿 哪天 哪几天 哪一天
多少 多久 多大 几次 几个 是否 有没有 是不是 能不能 会不会 一下 我们 咱们
那次 那个 这个 那些 这些 的时候 时候 之前 之后 以后 以前 现在 目前 当前
最新 最近 一次 因为 所以 的 了 吗 呢 吧 啊 么 是 谁 哪 呀 嘛 和 与 及 或
在 有 把 被 给 到 从 对 都 也 就 还 又 才 得 地 着 过
"""
STOPWORDS_EN = frozenset(_EN.split())
STOPWORDS_ZH = tuple(sorted(_ZH.split(), key=len, reverse=True))
_CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
# "Theo's band": the owner's name is the word, the "s" a token the note may not have ("Theo's" vs "Theo").
_POSSESSIVE = re.compile(r"(?<=[A-Za-z])['’]s\b")
# `max_num_seqs`, "MoyuBench-AAAI27", “Overleaf”: a name, setting or command the asker quotes exactly
_QUOTED = re.compile(r"`([^`\n]{1,200})`|\"([^\"\n]{1,200})\"|“([^”\n]{1,200})”")


class EmptyQueryError(ValueError):
    """The query has nothing searchable in it."""


@dataclass(frozen=True)
class Query:
    text: str
    phrases: tuple[str, ...]  # each a space-joined token sequence: every term, for highlighting
    truncated: bool = False
    required: tuple[str, ...] = ()  # the terms that must match (question words left out)
    optional: tuple[str, ...] = ()  # the relaxed retry's terms
    quoted: tuple[str, ...] = ()  # what the text put in backticks or double quotes: literals an answer holds

    @property
    def all_quoted(self) -> str:
        """Every quoted literal must match (each as a phrase); "" when nothing was quoted."""
        return " AND ".join(f'"{p}"' for p in self.quoted)

    @property
    def all_terms(self) -> str:
        """Every content term must match (each as a phrase)."""
        return " AND ".join(f'"{p}"' for p in self.required or self.phrases)

    @property
    def any_term(self) -> str:
        """At least one term must match: the relaxed retry."""
        return " OR ".join(f'"{p}"' for p in self.optional or self.phrases)

    @property
    def can_relax(self) -> bool:
        """The relaxed retry would ask something the strict one did not."""
        return set(self.optional or self.phrases) != set(self.required or self.phrases) or len(self.phrases) > 1

    def without(self, common: set[str]) -> Query:
        """This query with the ``common`` phrases no longer required nor ORed, unless nothing would be left."""
        required = tuple(p for p in self.required if p not in common) or self.required
        optional = tuple(p for p in self.optional if p not in common) or self.optional
        return replace(self, required=required, optional=optional)

    @property
    def token_set(self) -> frozenset[str]:
        return frozenset(t for p in self.phrases for t in p.split(" "))


def parse_query(text: str) -> Query:
    """Turn what a user typed into phrases; :class:`EmptyQueryError` when nothing is left."""
    phrases: list[str] = []
    words = _POSSESSIVE.sub("", text)
    for term in words.split():
        toks = terms(term)
        if toks:
            phrase = " ".join(toks)
            if phrase not in phrases:
                phrases.append(phrase)
    if not phrases:
        raise EmptyQueryError(
            "nothing to search for: the query needs letters, digits or CJK characters (punctuation is ignored)"
        )
    required: list[str] = []
    optional: list[str] = []
    for term in words.split():
        for piece in _content_pieces(term):
            phrase = " ".join(terms(piece))
            if phrase and phrase not in required:
                required.append(phrase)
            optional.extend(p for p in _relaxed_terms(piece) if p not in optional)
    quoted = [" ".join(terms(next(g for g in m.groups() if g is not None))) for m in _QUOTED.finditer(text)]
    return Query(
        text,
        tuple(phrases[:MAX_TERMS]),
        truncated=len(phrases) > MAX_TERMS,
        required=tuple(required[:MAX_TERMS]),
        optional=tuple(optional[:MAX_TERMS]),
        quoted=tuple(dict.fromkeys(q for q in quoted if q))[:MAX_TERMS],
    )


def _content_pieces(term: str) -> list[str]:
    """``term`` without its question words: a stopword term dropped, a Chinese run cut at its particles."""
    if not _CJK_RUN.search(term):
        words = tokens(term)
        return [term] if words and not all(w in STOPWORDS_EN for w in words) else []
    pieces, current, i = [], "", 0
    while i < len(term):
        stop = next((w for w in STOPWORDS_ZH if term.startswith(w, i)), None) if _CJK_RUN.match(term[i]) else None
        if stop:
            pieces.append(current)
            current, i = "", i + len(stop)
        else:
            current += term[i]
            i += 1
    pieces.append(current)
    return [p for p in pieces if tokens(p)]


def _relaxed_terms(piece: str) -> list[str]:
    """What the relaxed retry ORs for one piece: its words, and a Chinese run's two-character phrases."""
    out: list[str] = []
    last = 0
    for run in _CJK_RUN.finditer(piece):
        out.extend(_words_phrase(piece[last : run.start()]))
        chars = tokens(run.group())
        out.extend(" ".join(chars[i : i + 2]) for i in range(len(chars) - 1))  # a lone character: nothing
        last = run.end()
    out.extend(_words_phrase(piece[last:]))
    return out


def _words_phrase(text: str) -> list[str]:
    """Letters and digits between Chinese runs stay one phrase (``redis-01``: "redis 01")."""
    words = tokens(text)
    return [" ".join(stem(w) for w in words)] if words and not all(w in STOPWORDS_EN for w in words) else []


def highlight(
    text: str, wanted: frozenset[str], width: int = SNIPPET_CHARS, spans: list[tuple[int, int, str]] | None = None
) -> str:
    """The window of ``text`` with the most query tokens, matches wrapped in ``**`` (``spans``: the text's
    :func:`token_spans`, when the caller has them already)."""
    found: list[tuple[int, int]] = []
    for start, end, token in token_spans(text) if spans is None else spans:
        if token not in wanted:
            continue
        if found and found[-1][1] == start:  # 端口: one highlight, not two
            found[-1] = (found[-1][0], end)
        elif not found or found[-1] != (start, end):
            found.append((start, end))
    if not found:
        snippet = text[:width]
        return snippet.strip() + ("…" if len(text) > width else "")
    best_start, best_count = found[0][0], 0
    j = 0
    for i, (start, _end) in enumerate(found):
        while j < len(found) and found[j][1] <= start + width:
            j += 1
        if j - i > best_count:
            best_start, best_count = start, j - i
    begin = max(0, best_start - width // 4)
    begin = text.rfind("\n", 0, best_start) + 1 if best_start - begin > width // 4 else begin
    end = min(len(text), begin + width)
    out, pos = [], begin
    for start, stop in found:
        if start < begin or stop > end:
            continue
        out.append(text[pos:start])
        out.append(f"**{text[start:stop]}**")
        pos = stop
    out.append(text[pos:end])
    snippet = "".join(out).strip()
    return ("…" if begin > 0 else "") + snippet + ("…" if end < len(text) else "")
