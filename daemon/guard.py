"""The secret guard (Engram's never_store): find credentials before they are kept.

A finding names the kind of secret and the line, never the secret itself, so it
can be logged, shown in ``status`` and returned over the API.  The same patterns
redact log records as a last line of defence.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Files are scanned in blocks of whole lines: a 50 MB file costs a bounded
# amount of memory and every pattern still sees complete lines.
_BLOCK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    """A secret of ``kind`` on ``line`` (1-based). Deliberately carries no text."""

    kind: str
    line: int

    def __str__(self) -> str:
        return f"line {self.line}: matches never_store pattern {self.kind!r}"


class SecretGuard:
    """Compiled never_store patterns with text, file and log-record scanning."""

    def __init__(self, patterns: Iterable[tuple[str, str]]) -> None:
        self._patterns = [(name, re.compile(pattern)) for name, pattern in patterns]

    def scan_text(self, text: str, first_line: int = 1) -> list[Finding]:
        findings: set[Finding] = set()
        for kind, regex in self._patterns:
            for match in regex.finditer(text):
                findings.add(Finding(kind, first_line + text.count("\n", 0, match.start())))
        return sorted(findings, key=lambda f: (f.line, f.kind))

    def scan_file(self, path: Path) -> list[Finding]:
        """Scan a file of any size or encoding; unreadable bytes are replaced, not fatal."""
        findings: list[Finding] = []
        line_no = 1
        with path.open("rb") as fh:
            while True:
                block = fh.read(_BLOCK_BYTES)
                if not block:
                    break
                if not block.endswith(b"\n"):
                    block += fh.readline()
                text = block.decode("utf-8", errors="replace")
                findings.extend(self.scan_text(text, line_no))
                line_no += text.count("\n")
        return findings

    def redact(self, text: str) -> str:
        for kind, regex in self._patterns:
            text = regex.sub(f"[redacted {kind}]", text)
        return text


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
