"""The secret guard (Engram's never_store): find credentials before they are kept.

A finding names the kind of secret and the line, never the secret itself, so it
can be logged, shown in ``status`` and returned over the API.  The same patterns
redact log records as a last line of defence.

Rules follow gitleaks' shape: a regular expression, *keywords* that must occur
(case-insensitively) in the text before the expression is even tried, and for
generic ``secret = …`` assignments a minimum Shannon entropy of the value, so
``password: see the vault entry`` is prose while a password assigned a random
string of letters, digits and symbols is a secret.  The value a rule checks is the expression's ``secret`` group when it
has one, else the whole match; only that span is redacted.
"""

from __future__ import annotations

import io
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# Files are scanned in blocks of whole lines, so every pattern sees complete lines.  A line
# longer than a block (a file without newlines) is cut, and the block after it starts with
# the cut's last _OVERLAP_BYTES again: memory stays bounded and a secret across the cut is
# still seen whole (secrets without a newline are far shorter than the overlap).
_BLOCK_BYTES = 1024 * 1024
_OVERLAP_BYTES = 4096


def _text_blocks(fh: BinaryIO) -> Iterator[tuple[str, int]]:
    """(text, number of its first line) for consecutive blocks of at most 2 MiB of ``fh``."""
    line_no = 1
    carry = b""
    while block := fh.read(_BLOCK_BYTES):
        if not block.endswith(b"\n"):
            block += fh.readline(_BLOCK_BYTES)
        block = carry + block
        carry = b"" if block.endswith(b"\n") else block[-_OVERLAP_BYTES:]
        text = block.decode("utf-8", errors="replace")
        yield text, line_no
        line_no += text.count("\n")


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value`` (gitleaks' measure: 0 for "aaaa", ~4.5+ for random base64)."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


@dataclass(frozen=True)
class Finding:
    """A secret of ``kind`` on ``line`` (1-based). Deliberately carries no text."""

    kind: str
    line: int

    def __str__(self) -> str:
        return f"line {self.line}: matches never_store pattern {self.kind!r}"


@dataclass(frozen=True)
class Rule:
    """One compiled never_store pattern."""

    kind: str
    regex: re.Pattern[str]
    keywords: tuple[str, ...] = ()  # lower-case; the rule runs only when one occurs in the text
    min_entropy: float | None = None  # of the secret span

    def applies(self, lowered: str) -> bool:
        return not self.keywords or any(k in lowered for k in self.keywords)

    def span(self, match: re.Match[str]) -> tuple[int, int] | None:
        """The secret's span in the text, or None when the match is not a secret (low entropy)."""
        group = "secret" if "secret" in self.regex.groupindex else 0
        start, end = match.span(group)
        if start < 0:
            return None
        if self.min_entropy is not None and shannon_entropy(match.string[start:end]) < self.min_entropy:
            return None
        return start, end


RuleSpec = tuple[str, str] | tuple[str, str, Sequence[str], float | None]


def compile_rule(spec: RuleSpec | object) -> Rule:
    """A rule from ``(name, pattern[, keywords, min_entropy])`` or an object with those attributes."""
    if isinstance(spec, tuple):
        name, pattern, keywords, min_entropy = (*spec, (), None)[:4]
    else:
        name, pattern = spec.name, spec.pattern  # type: ignore[attr-defined]
        keywords, min_entropy = getattr(spec, "keywords", ()), getattr(spec, "min_entropy", None)
    return Rule(name, re.compile(pattern), tuple(k.lower() for k in keywords or ()), min_entropy)


class SecretGuard:
    """Compiled never_store rules with text, file and log-record scanning."""

    def __init__(self, patterns: Iterable[RuleSpec | object]) -> None:
        self.rules = [compile_rule(p) for p in patterns]

    def _spans(self, text: str) -> Iterable[tuple[Rule, int, int]]:
        lowered = text.lower()  # only searched for keywords: positions need not line up
        taken: list[tuple[int, int]] = []
        for rule in self.rules:
            if not rule.applies(lowered):
                continue
            for match in rule.regex.finditer(text):
                span = rule.span(match)
                # Rules run specific first: a secret an earlier rule named is not found again
                # by a generic one (one finding per secret, with its most precise kind).
                if span is not None and not any(s < span[1] and span[0] < e for s, e in taken):
                    taken.append(span)
                    yield rule, *span

    def scan_text(self, text: str, first_line: int = 1) -> list[Finding]:
        findings = {Finding(rule.kind, first_line + text.count("\n", 0, start)) for rule, start, _ in self._spans(text)}
        return sorted(findings, key=lambda f: (f.line, f.kind))

    def contains_secret(self, text: str) -> bool:
        return next(iter(self._spans(text)), None) is not None

    def scan_file(self, path: Path) -> list[Finding]:
        """Scan a file of any size or encoding (for files the daemon owns; workspace files come as bytes)."""
        with path.open("rb") as fh:
            return self.scan_stream(fh)

    def scan_bytes(self, data: bytes) -> list[Finding]:
        """Scan the bytes of one file version (what :mod:`daemon.common.fileread` read)."""
        return self.scan_stream(io.BytesIO(data))

    def scan_stream(self, fh: BinaryIO) -> list[Finding]:
        """Scan in bounded blocks; unreadable bytes are replaced, not fatal."""
        findings: set[Finding] = set()
        for text, first_line in _text_blocks(fh):
            findings.update(self.scan_text(text, first_line))
        return sorted(findings, key=lambda f: (f.line, f.kind))

    def redact(self, text: str) -> str:
        """``text`` with every secret span replaced by ``[redacted KIND]``."""
        spans = sorted(self._spans(text), key=lambda s: (s[1], -s[2]))
        out, pos = [], 0
        for rule, start, end in spans:
            if start < pos:
                continue  # overlaps a span already redacted
            out += [text[pos:start], f"[redacted {rule.kind}]"]
            pos = end
        return "".join(out) + text[pos:] if out else text


class RedactingFilter(logging.Filter):
    """Rewrites log records so a secret that reaches a message is never written out."""

    def __init__(self, guard: SecretGuard) -> None:
        super().__init__()
        self.guard = guard

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.guard.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True
