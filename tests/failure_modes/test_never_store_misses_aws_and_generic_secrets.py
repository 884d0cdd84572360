"""never_store used to miss AWS secret access keys and generic high-entropy assignments.

Before: of the samples below the default rules found 7 of 26 (no ``aws_secret_access_key = …``,
no ``token=…``/``secret:``/``client_secret``, no 密码), and flagged the prose line
``password: see the vault entry for the staging db``.  The rules now follow gitleaks'
(keywords prefilter, Shannon entropy for generic assignments) and stay quiet on ordinary
bilingual notes and on this repository's own files.

Every fake secret is built at run time from a seeded generator, so no file holds
key-shaped text (the guard scans this repository in the last test).
"""

from __future__ import annotations

import random
import string
import subprocess

import pytest

from daemon.common.config import DEFAULT_NEVER_STORE
from daemon.common.guard import RedactingFilter, SecretGuard, shannon_entropy
from tests.helpers import FAKE_API_KEY, FAKE_AWS_KEY, REPO_ROOT

GUARD = SecretGuard(DEFAULT_NEVER_STORE)
_RNG = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    """A random string that mixes letters and digits (what real keys look like)."""
    mixed = any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet)
    while True:
        value = "".join(_RNG.choice(alphabet) for _ in range(n))
        if not mixed or (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return value


AWS_SECRET = rand(40, ALNUM + "/+")
LOGIN_PHRASE = rand(14, ALNUM + "#%&!")

# (sample line, the kind that must be found)
SAMPLES = [
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_key"),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "aws_secret_key"),
    (f'  "aws_secret_access_key": "{AWS_SECRET}",', "aws_secret_key"),
    (f"export AWS_SECRET_KEY='{AWS_SECRET}'", "aws_secret_key"),
    (f"aws_access_key_id = {FAKE_AWS_KEY}", "aws_access_key"),
    (f"OPENAI_API_KEY={FAKE_API_KEY}", "api_key"),
    ("github: ghp_" + rand(36), "github_token"),
    ("gitlab glpat-" + rand(20), "gitlab_token"),
    ("slack xoxb-" + rand(12, string.digits) + "-" + rand(24), "slack_token"),
    ("hook https://hooks.slack.com/services/T" + rand(8) + "/B" + rand(8) + "/" + rand(24), "slack_webhook"),
    ("maps AIza" + rand(35), "google_api_key"),
    ("stripe sk_live_" + rand(24), "stripe_key"),
    ("阿里云 AccessKey ID: LTAI" + rand(20), "alibaba_access_key"),
    ("hf_" + rand(34, string.ascii_letters), "huggingface_token"),
    ("npm_" + rand(36), "npm_token"),
    ("SG." + rand(22) + "." + rand(43), "sendgrid_key"),
    ("DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + rand(86, ALNUM + "+/") + "==", "azure_storage_key"),
    ("-----BEGIN RSA " + "PRIVATE KEY-----", "private_key"),
    ("eyJ" + rand(20) + ".eyJ" + rand(30) + "." + rand(43), "jwt"),
    (f"password: {LOGIN_PHRASE}", "password"),
    (f"DB_PASSWORD={LOGIN_PHRASE}", "password"),
    (f"数据库密码：{LOGIN_PHRASE}", "password"),
    (f"token={rand(32)}", "generic_secret"),
    (f"client_secret: '{rand(40, ALNUM + '_-')}'", "generic_secret"),
    (f"Authorization: Bearer {rand(40, ALNUM + '._-')}", "bearer_token"),
    ("postgres://app:" + rand(16) + "@db.internal:5432/app", "url_credentials"),
]

BILINGUAL_NOTES = """\
# 2026-11-29 运维笔记 / ops notes

## Qdrant 迁移
- Qdrant 部署在 6333 端口，collection `mem0_v4_shared`，embedding 维度 1024。
- password: see the vault entry for the staging db
- 密码：见 1Password 里的 "staging-db" 条目，不要写在这里。
- token budget: 6000 tokens per session; `core.budget_tokens` 控制它。
- api_key_env: LLM_API_KEY（密钥放在环境变量里，不放配置文件）
- qdrant.api_key_file: /etc/memstrata/qdrant.key
- The access key for the backup bucket was rotated on 2026-11-01; ask ops for the new one.
- secret rotation policy: every 90 days, owner is the platform team.
- Bearer tokens are issued by the gateway; see docs/auth.md.
- 令牌过期时间：24 小时；刷新接口 /v1/token/refresh。
- commit 3a1358a fixed the token refresh race (see PR #42).
- password policy: at least 12 characters, rotated monthly.
- ssh://git@github.com/example/memstrata.git 是仓库地址。
- 数据库连接：postgres://app@db.internal:5432/app（密码在 vault）。
- export PATH=$HOME/.local/bin:$PATH
- task-management-system-for-agents 的设计稿在 docs/ 下。
"""


@pytest.mark.parametrize(("line", "kind"), SAMPLES, ids=[k for _, k in SAMPLES])
def test_each_sample_secret_is_found_with_its_kind_and_redacted(line, kind):
    findings = GUARD.scan_text(f"# notes\n\n{line}\n")
    assert [(f.kind, f.line) for f in findings] == [(kind, 3)], line
    redacted = GUARD.redact(line)
    assert f"[redacted {kind}]" in redacted
    for secret in (AWS_SECRET, LOGIN_PHRASE, FAKE_API_KEY):
        assert secret not in redacted


def test_the_whole_sample_set_is_found():
    text = "\n".join(line for line, _ in SAMPLES) + "\n"
    found = GUARD.scan_text(text)
    assert {f.line for f in found} == set(range(1, len(SAMPLES) + 1))
    assert len(SAMPLES) >= 25


def test_ordinary_bilingual_notes_find_nothing():
    assert GUARD.scan_text(BILINGUAL_NOTES) == []
    assert GUARD.redact(BILINGUAL_NOTES) == BILINGUAL_NOTES


@pytest.mark.parametrize(
    "line",
    [
        "password: see the vault entry for the staging db",
        "password: changeme",
        "token=abc",
        "secret: aaaaaaaaaaaaaaaaaaaaaaaa1",
        "api_key: " + "0123456789" * 2,
        "aws_secret_access_key = " + "x" * 39 + "1",
    ],
)
def test_low_entropy_or_prose_assignments_are_not_secrets(line):
    assert GUARD.scan_text(line) == [], line


def test_entropy_is_shannon_bits_per_character():
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)


def test_log_records_are_redacted_with_the_new_rules():
    import logging

    record = logging.LogRecord("t", logging.INFO, __file__, 1, "got aws_secret_access_key=%s", (AWS_SECRET,), None)
    RedactingFilter(GUARD).filter(record)
    assert AWS_SECRET not in record.getMessage() and "[redacted aws_secret_key]" in record.getMessage()


def test_this_repository_does_not_trip_the_guard():
    """The code, docs, tests and templates hold no key-shaped text (fakes are built at run time)."""
    files = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-co", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hits = []
    for rel in files:
        path = REPO_ROOT / rel
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 2_000_000:
            hits += [f"{rel}: {f}" for f in GUARD.scan_file(path)]
    assert hits == []
