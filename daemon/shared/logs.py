"""Logging to stderr for journald: levels as syslog priorities, secrets redacted."""

from __future__ import annotations

import logging
import os
import sys

from daemon.shared.guard import RedactingFilter, SecretGuard

_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


class JournalFormatter(logging.Formatter):
    """Under journald, prefix ``<N>`` so ``journalctl -p warning`` works; else a plain line."""

    def __init__(self, journal: bool) -> None:
        fmt = "%(levelname)s %(name)s: %(message)s" if journal else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        super().__init__(fmt, datefmt="%H:%M:%S")
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if self.journal:
            prio = _PRIORITY.get(record.levelno, 6)
            text = "\n".join(f"<{prio}>{line}" for line in text.splitlines())
        return text


def setup_logging(level: str, guard: SecretGuard | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JournalFormatter(journal=bool(os.environ.get("JOURNAL_STREAM"))))
    if guard is not None:
        handler.addFilter(RedactingFilter(guard))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("git", "watchdog", "uvicorn", "uvicorn.error", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
