"""The secret guard: every default pattern fires, findings and logs never carry the secret."""

from __future__ import annotations

import logging

import pytest

from daemon.common.config import DEFAULT_NEVER_STORE
from daemon.common.guard import RedactingFilter, SecretGuard
from tests.helpers import FAKE_API_KEY, FAKE_AWS_KEY

GUARD = SecretGuard(DEFAULT_NEVER_STORE)

SAMPLES = {
    "api_key": f"OPENAI_API_KEY={FAKE_API_KEY}",
    "aws_access_key": f"aws {FAKE_AWS_KEY}",
    "github_token": "token ghp_" + "a1B2" * 9,
    "slack_token": "xoxb-" + "123456789012-abcdef",
    # A password needs a high-entropy value now ("password: see the vault" is prose).
    "password": "db password=" + "c0rrect-h0rse#B4ttery",
    # Built from pieces so this file holds no key-shaped text (the guard scans the repository).
    "private_key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----",
    "jwt": ".".join(
        ("eyJ" + "hbGciOiJIUzI1NiJ9", "eyJ" + "zdWIiOiIxMjM0NTY3ODkwIn0", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
    ),
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_default_pattern_finds_its_secret_on_the_right_line(kind):
    findings = GUARD.scan_text(f"# notes\n\n{SAMPLES[kind]}\n")
    assert [(f.kind, f.line) for f in findings] == [(kind, 3)]
    assert SAMPLES[kind] not in str(findings[0])


def test_ordinary_memory_is_not_flagged():
    text = "Qdrant 部署在 6333 端口\npassword policy: rotate monthly is a sentence, not a secret?\nsk-short\n"
    kinds = {f.kind for f in GUARD.scan_text(text)}
    assert "api_key" not in kinds


def test_scan_file_handles_big_and_non_utf8_files(tmp_path):
    path = tmp_path / "big.md"
    with path.open("wb") as fh:
        fh.write(b"\xff\xfe binary junk\n" * 100_000)
        fh.write(f"{FAKE_AWS_KEY}\n".encode())
    findings = GUARD.scan_file(path)
    assert [(f.kind, f.line) for f in findings] == [("aws_access_key", 100_001)]


def test_log_records_are_redacted(caplog):
    logger = logging.getLogger("test.redact")
    handler_filter = RedactingFilter(GUARD)
    record = logger.makeRecord("test.redact", logging.INFO, __file__, 1, "got %s", (FAKE_API_KEY,), None)
    handler_filter.filter(record)
    assert FAKE_API_KEY not in record.getMessage()
    assert "[redacted api_key]" in record.getMessage()
