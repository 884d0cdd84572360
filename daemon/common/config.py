"""The configuration: one YAML file, validated, with OpenClaw's layout as defaults.

Every path can be overridden; templates (``{root}``, ``{workspace}``, ``{agent}``)
let one setting follow another, and relative paths are taken from the
configuration file's directory so a demo root can be moved around whole.

Secrets never live in this file: a key that looks like one (``api_key``,
``password``, ``token``…) is refused with a pointer to ``*_env`` / ``*_file``.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic
import yaml
from pydantic_core import CoreSchema, core_schema

from daemon.common.config_cache import Paths, config_path  # kept there: the front's cache builds it without pydantic
from daemon.common.echo import shown
from layers.common.yamlfile import (
    Problem,
    StrictModel,
    YamlFileError,
    format_key,
    line_of,
    read_text,
    read_yaml,
    validate,
)
from layers.conversation.policy.rules import DEFAULT_RETENTION_DAYS
from protocol.locations import DEFAULT_PATHS, TEMPLATED, resolve_paths
from protocol.vocabulary import AGENT_ID_PATTERN

# Where `memstrata model build` writes the default local model: inside the install,
# so the service's virtualenv carries it.
DEFAULT_MODEL_PATH = Path(sys.prefix) / "share" / "memstrata" / "models" / "multilingual-e5-small-q4_0.gguf"
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL


# memstrata's L3 index is a file of its own (protocol/locations.py DEFAULT_PATHS).  The old default was
# QMD's own live index on an OpenClaw host; an index of ours found there is moved once (daemon/local/index_files.py).
DEFAULT_INDEX = DEFAULT_PATHS["index"]
LEGACY_DEFAULT_INDEX = "{root}/agents/{agent}/qmd/xdg-cache/qmd/index.sqlite"


# YAML 1.1 (PyYAML) reads these words, unquoted, as booleans: ``backend: off`` arrives as False.
YAML_TRUE_WORDS = ("on", "yes", "true", "y")
YAML_FALSE_WORDS = ("off", "no", "false", "n")


class YamlChoice:
    """In ``Annotated[Literal[...], YAML_CHOICE]``: the ``Literal``'s choices, forgiving YAML 1.1: a
    boolean read from an unquoted word becomes the one choice spelled that way (``off`` for False,
    ``on`` for True).  The choices are read from the annotation, so they are written once."""

    def __get_pydantic_core_schema__(self, source: Any, handler: pydantic.GetCoreSchemaHandler) -> CoreSchema:
        choices: tuple[str, ...] = get_args(source)

        def from_yaml_bool(value: object) -> object:
            if isinstance(value, bool):
                words = YAML_TRUE_WORDS if value else YAML_FALSE_WORDS
                matches = [c for c in choices if c.lower() in words]
                if len(matches) == 1:
                    return matches[0]
                unquoted = " / ".join(words[:3])
                raise ValueError(f"read as a boolean (unquoted {unquoted}); choose one of: {', '.join(choices)}")
            return value

        return core_schema.no_info_before_validator_function(from_yaml_bool, handler(source))


YAML_CHOICE = YamlChoice()


def choices_of(annotation: object) -> tuple[str, ...]:
    """The values a ``Literal`` field (with :data:`YAML_CHOICE` or without) accepts; () for other types."""
    for arg in (annotation, *get_args(annotation)):
        values = get_args(arg)
        if values and all(isinstance(v, str) for v in values):
            return values
    return ()


class PathsConfig(StrictModel):
    """The ``paths:`` section; its defaults are protocol/locations.py's, which the skill's client reads too."""

    root: str = DEFAULT_PATHS["root"]
    workspace: str = DEFAULT_PATHS["workspace"]
    agents_dir: str = DEFAULT_PATHS["agents_dir"]
    index: str = DEFAULT_INDEX
    state_dir: str = DEFAULT_PATHS["state_dir"]
    socket: str = DEFAULT_PATHS["socket"]
    registry: str = DEFAULT_PATHS["registry"]
    audit_dir: str = DEFAULT_PATHS["audit_dir"]


class WatchConfig(StrictModel):
    mode: Annotated[Literal["auto", "inotify", "polling"], YAML_CHOICE] = "auto"
    debounce_ms: int = pydantic.Field(300, ge=0, le=60_000)
    reconcile_interval_s: float = pydantic.Field(300.0, gt=0)
    poll_interval_s: float = pydantic.Field(2.0, gt=0)
    max_file_mb: float = pydantic.Field(5.0, gt=0)


class GitConfig(StrictModel):
    quiet_period_s: float = pydantic.Field(5.0, ge=0)
    max_delay_s: float = pydantic.Field(60.0, ge=0)
    stale_lock_s: float = pydantic.Field(60.0, ge=0)
    author_name: str = "memstrata"
    author_email: str = "memstrata@localhost"
    # L2 to a central remote (daemon/service/pusher.py): a git URL (ssh://git@hub/srv/memstrata/fleet.git)
    # or a path to a bare repository; None: no sync at all.  The key file and known_hosts are ssh's
    # (a path needs neither); relative paths are taken from the configuration file's directory.
    remote: str | None = None
    remote_key_file: str | None = None
    remote_known_hosts_file: str | None = None  # None: ssh's own (~/.ssh/known_hosts)
    remote_host_keys: Annotated[Literal["accept-new", "yes"], YAML_CHOICE] = "accept-new"
    remote_timeout_s: float = pydantic.Field(120.0, gt=0, le=3600)  # one push or fetch, whole
    push_retry_max_s: float = pydantic.Field(300.0, ge=1, le=86_400)  # the back-off's cap while unreachable
    status_interval_s: float = pydantic.Field(300.0, ge=10, le=86_400)  # the host's report to the remote, idle

    @pydantic.field_validator("remote")
    @classmethod
    def _a_remote(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value.startswith("-") or any(c in value for c in "\0\n\r")):
            raise ValueError("not a git URL or a path to a bare repository")
        return value or None


DEFAULT_SILENT_AFTER_S = 900.0  # fleet.silent_after_s unset: 15 minutes (or twice git.status_interval_s)


class FleetConfig(StrictModel):
    """This host among several (issue 47): its name on the remote (``refs/memstrata/<host>/...``), and
    which side of the shared core it is (daemon/files/shared_sync.py)."""

    host: str | None = None  # None: the hostname (lower-cased, up to its first dot)
    # hub: this host's <main workspace>/shared/ is the cluster's core, pushed to git.remote after each
    # change; spoke: it is fetched from there and installed read-only.  Never inferred (from a path
    # remote, say): a host wrongly taken for the hub would push its copy over the cluster's.
    role: Annotated[Literal["hub", "spoke"], YAML_CHOICE] = "spoke"
    shared_poll_s: float = pydantic.Field(60.0, ge=1, le=86_400)  # a spoke asks the remote this often
    # On the hub, `status --fleet`: a host whose last report reached the hub longer ago is SILENT.
    # None: 15 minutes, or twice git.status_interval_s when that is longer (a host on time is never silent)
    silent_after_s: float | None = pydantic.Field(None, ge=10, le=30 * 86_400)
    # On the hub: where its peer API answers the spokes' L4 requests (daemon/api/peer.py), "HOST:PORT",
    # the hub's tailnet address; None: off.  Never a wildcard address (0.0.0.0, ::): see listen_address.
    listen: str | None = None
    # On the hub: how long its change feed keeps a row for the spokes' replicas (daemon/conversation/feed.py),
    # and at most how many; a spoke that was away longer rebuilds its replica from a snapshot.
    feed_retention_days: float = pydantic.Field(7.0, gt=0, le=3650)
    feed_max_entries: int = pydantic.Field(100_000, ge=100, le=100_000_000)

    @pydantic.field_validator("host")
    @classmethod
    def _a_host(cls, value: str | None) -> str | None:
        if value is not None:
            check_host_name(value)
        return value

    @pydantic.field_validator("listen")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is not None:
            listen_address(value)
        return value


def listen_address(value: str) -> tuple[str, int]:
    """``fleet.listen``'s ``HOST:PORT`` (``[v6]:PORT``) as (host, port); ValueError naming the key otherwise.

    A wildcard address is refused: the peer API would then answer on every interface of the hub, the
    public one included, where a stolen host key is all it takes.  The tailnet address is the one to give.
    """
    import ipaddress

    host, colon, port = value.strip().rpartition(":")
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"fleet.listen: {shown(value)} is not HOST:PORT (e.g. 100.101.102.103:7000, the hub's tailnet address)"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = host in ("", "*")
        if not wildcard and not re.fullmatch(r"[A-Za-z0-9.-]{1,253}", host):
            raise ValueError(f"fleet.listen: {shown(host)} is not an address or a host name") from None
    if wildcard:
        raise ValueError(
            f"fleet.listen: {value!r} would answer on every interface of the hub: give the address spokes reach "
            "it at (its tailnet address, e.g. 100.101.102.103:7000)"
        )
    return host, int(port)


def check_host_name(value: str) -> str:
    """``value`` when it may name this host on the remote: an agent id's pattern, and not ``shared``
    (``refs/memstrata/shared/`` is the shared core's); ValueError otherwise."""
    if not re.fullmatch(AGENT_ID_PATTERN.strip("^$"), value):
        raise ValueError(
            f"{shown(value)} cannot name a host: 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or "
            "digit"
        )
    if value == "shared":
        raise ValueError("'shared' names the shared core on the remote (refs/memstrata/shared/), not a host")
    return value


class DailyConfig(StrictModel):
    archive_after_days: int | None = pydantic.Field(None, ge=1)


class CoreConfig(StrictModel):
    budget_tokens: int = pydantic.Field(6000, ge=1)


class SecretPattern(StrictModel):
    """One never_store rule, gitleaks-style (see :mod:`daemon.common.guard`)."""

    name: str
    pattern: str
    # The rule runs only on text containing one of these (case-insensitive): cheap, and
    # it keeps broad expressions off text that cannot hold their secret.
    keywords: list[str] = pydantic.Field(default_factory=list)
    # Minimum Shannon entropy (bits/char) of the match, or of its ``secret`` group:
    # what tells ``password: see the vault`` from a password assigned a random value.
    min_entropy: float | None = pydantic.Field(None, ge=0, le=8)

    @pydantic.field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


# The default rules, after gitleaks' rule set (github.com/gitleaks/gitleaks, config/gitleaks.toml):
# its provider rules for the credentials an agent workspace is likely to meet, plus
# aws_secret_key and gitleaks' "generic-api-key" idea (a secret-ish key assigned a
# high-entropy value, entropy >= 3.5) split into password / generic_secret, with the
# Chinese key words of a bilingual cluster.  Generic values must mix letters and
# digits and are never paths or ${VAR} references, which keeps prose and config
# pointers (``api_key_env: LLM_API_KEY``) out.
_V = r"[A-Za-z0-9_.=+~-]"  # characters of a generic secret value (no "/": paths are not secrets)
_ASSIGN = r"""[\w.-]{0,20}['"]?\s{0,3}(?:=>|:=|=|:|：)\s{0,3}['"]?"""
DEFAULT_NEVER_STORE: tuple[SecretPattern, ...] = tuple(
    SecretPattern(name=n, pattern=p, keywords=list(k), min_entropy=e)
    for n, p, k, e in (
        ("api_key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}", ("sk-",), None),
        (
            "aws_access_key",
            r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
            ("akia", "asia", "abia", "acca", "a3t"),
            None,
        ),
        (
            "aws_secret_key",
            r"""(?i)aws_?secret_?(?:access_?)?key['"]?\s{0,3}(?:=>|:=|=|:)\s{0,3}['"]?"""
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
            ("aws",),
            3.0,
        ),
        (
            "github_token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
            ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
            None,
        ),
        ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}", ("glpat-",), None),
        ("slack_token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}", ("xox",), None),
        (
            "slack_webhook",
            r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{20,}",
            ("hooks.slack.com",),
            None,
        ),
        ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}", ("aiza",), None),
        (
            "stripe_key",
            r"\b(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,}",
            ("sk_test", "sk_live", "sk_prod", "rk_test", "rk_live", "rk_prod"),
            None,
        ),
        ("alibaba_access_key", r"\bLTAI[A-Za-z0-9]{12,20}\b", ("ltai",), 3.0),
        ("huggingface_token", r"\bhf_[A-Za-z]{34}\b", ("hf_",), None),
        ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b", ("npm_",), None),
        ("sendgrid_key", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b", ("sg.",), None),
        ("azure_storage_key", r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/]{80,100}={0,2})", ("accountkey",), None),
        ("private_key", r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", ("-----begin",), None),
        ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", ("eyj",), None),
        (
            "password",
            r"(?i)(?:passw(?:or)?d|\bpwd|passphrase|密码|口令)" + _ASSIGN + r"(?P<secret>(?![/~<{$])"
            r"""(?=[^\s'"]*\d)[^\s'"，。；]{8,})""",
            ("passw", "pwd", "passphrase", "密码", "口令"),
            3.0,
        ),
        (
            "generic_secret",
            r"(?i)(?:secret|token|api[_-]?key|apikey|access[_-]?key|auth[_-]?key|credentials?|密钥|令牌)"
            + _ASSIGN
            + rf"(?P<secret>(?={_V}*\d)(?={_V}*[A-Za-z]){_V}{{16,}})(?![A-Za-z0-9_.=+~/-])",
            ("secret", "token", "key", "credential", "密钥", "令牌"),
            3.5,
        ),
        ("bearer_token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{20,}=*)", ("bearer",), 3.5),
        (
            "url_credentials",
            r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@]{1,64}:(?P<secret>[^\s:/@]{3,128})@[^\s/@]",
            ("://",),
            3.0,
        ),
    )
)


class GuardConfig(StrictModel):
    never_store: list[SecretPattern] = pydantic.Field(default_factory=lambda: list(DEFAULT_NEVER_STORE))


class OpenAIEmbeddingConfig(StrictModel):
    """An OpenAI-compatible embeddings endpoint (the seed's OneAPI ``text-embedding-v4``)."""

    base_url: str = "http://100.115.94.1:3000/v1"
    api_key_env: str = "LLM_API_KEY"
    model: str = "text-embedding-v4"
    dim: int = pydantic.Field(1024, ge=1)
    timeout_s: float = pydantic.Field(10.0, gt=0)


class VectorsConfig(StrictModel):
    """On-demand vectors for L3: loaded only when free memory allows."""

    backend: Annotated[Literal["local", "openai", "off"], YAML_CHOICE] = "local"
    model_path: str | None = None  # None: the model `memstrata model build` writes
    profile: Annotated[Literal["e5", "bge-zh", "plain"], YAML_CHOICE] = "e5"
    min_free_mb: int = pydantic.Field(300, ge=0)
    idle_unload_s: float = pydantic.Field(120.0, gt=0)
    # pressure: the model stays loaded while memory is plentiful and goes once less than min_free_mb
    # is free (unused for 5 s); idle: also after idle_unload_s unused (layers/local/models/vectors.py)
    unload: Annotated[Literal["pressure", "idle"], YAML_CHOICE] = "pressure"
    batch_size: int = pydantic.Field(16, ge=1, le=512)
    threads: int = pydantic.Field(2, ge=1, le=64)  # cores an embedding uses; the built model: a llama context each
    openai: OpenAIEmbeddingConfig = OpenAIEmbeddingConfig()


class QdrantConfig(StrictModel):
    """The Qdrant server L4 uses when ``conversation.backend`` is ``remote``."""

    url: str = "http://100.115.94.1:6333"
    api_key_env: str | None = None  # environment variable holding the server's API key
    api_key_file: str | None = None  # …or a file holding it
    timeout_s: float = pydantic.Field(5.0, gt=0, le=120)
    collection: str = pydantic.Field("mem0_v4_shared", pattern=r"^[A-Za-z0-9_-]{1,128}$")


class Mem0ApiConfig(StrictModel):
    """mem0's platform REST API (the part ``mem0.MemoryClient`` calls), served on a loopback TCP port.

    Off by default.  The API key a client sends is an agent's workspace token: the caller is that agent.
    Only a loopback address may be given: the token travels in clear over plain HTTP.
    """

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = pydantic.Field(8765, ge=1, le=65535)

    @pydantic.field_validator("host")
    @classmethod
    def _loopback(cls, value: str) -> str:
        import ipaddress

        try:
            loopback = ipaddress.ip_address(value).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"{shown(value)} is not a loopback address (127.0.0.1 or ::1): tokens travel in clear")
        return value


class HubConfig(StrictModel):
    """Where a spoke's L4 is when ``conversation.backend`` is ``hub``: the hub's peer API (docs/fleet-l4.md)."""

    url: str = pydantic.Field(
        pattern=r"^http://[^/?#@\s]+(:[0-9]{1,5})?/?$"
    )  # http://HOST:PORT, the hub's fleet.listen
    key_file: str  # this host's key, as `memstrata fleet add-host` wrote it on the hub (mode 0600)
    timeout_s: float = pydantic.Field(10.0, gt=0, le=120)  # one request to the hub, whole


class LlmConfig(StrictModel):
    """An OpenAI-compatible chat endpoint; when set, writes may use mem0's inference."""

    base_url: str
    model: str
    api_key_env: str = "LLM_API_KEY"


class DedupConfig(StrictModel):
    """Dedup on write (infer off): an exact duplicate is not stored again; optionally a near one updates it.

    ``near_threshold`` is the cosine of two e5 passage vectors at or above which a new memory is
    taken as a restatement of one already stored in the same scope (agent, visibility, project,
    type) and replaces its text.  Measured on multilingual-e5-small (bench/bench_dedup.py):
    exact duplicates up to whitespace and punctuation 0.995-1.000, paraphrases 0.940-0.989,
    unrelated memories 0.701-0.901 (mean 0.774), but distinct facts in near-identical words
    score as high as duplicates: "会议改到周三下午三点" / "…周四…" 0.995, "Qdrant 部署在 6333 端口" /
    "…6334…" 0.993, "paging note 0: …" / "paging note 1: …" 0.973, "Alice prefers tea…" /
    "Bob prefers tea…" 0.951.  No threshold separates those from restatements, and an UPDATE
    overwrites a memory, so near-duplicate merging is off (null) unless configured: 0.95 merges
    most paraphrases, 0.99 only near-verbatim ones.
    """

    enabled: bool = True
    near_threshold: float | None = pydantic.Field(None, gt=0.0, le=1.0)


class DecayConfig(StrictModel):
    """Decay by use (layers/conversation/policy/decay.py): half-lives per type, the cap on use, the archive floor.

    ``half_life_days`` overrides the defaults (session 2, chat_summary 10, task_log 30, procedure 90;
    null: never decays); the permanent types never decay.  ``rank_weight``: how much importance moves a
    search result (its score times 1 - w + w x importance; 0: ranking by relevance alone).
    """

    half_life_days: dict[str, float | None] = pydantic.Field(default_factory=dict)
    cap: float = pydantic.Field(3.0, gt=0)
    archive_below: float = pydantic.Field(0.10, ge=0, lt=1)
    rank_weight: float = pydantic.Field(0.02, ge=0, le=1)

    @pydantic.field_validator("half_life_days")
    @classmethod
    def _known_types(cls, value: dict[str, float | None]) -> dict[str, float | None]:
        from layers.conversation.policy.rules import FIXED_PERMANENT, MEMORY_TYPES

        for name, days in value.items():
            if name not in MEMORY_TYPES:
                raise ValueError(f"unknown memory type {shown(name)} (types: {', '.join(MEMORY_TYPES)})")
            if name in FIXED_PERMANENT and days is not None:
                raise ValueError(f"{name} memories never decay; remove it or set it to null")
            if days is not None and days <= 0:
                raise ValueError(f"{name}: a half-life is more than 0 days (null: never decays)")
        return value


class ConversationConfig(StrictModel):
    """L4: the shared Mem0/Qdrant memory, brokered by the daemon."""

    enabled: bool = True
    backend: Annotated[Literal["embedded", "remote", "hub"], YAML_CHOICE] = "embedded"
    qdrant: QdrantConfig = QdrantConfig()
    hub: HubConfig | None = None  # backend hub: the hub's peer API and this host's key
    llm: LlmConfig | None = None
    # Days a memory of each type lives; null never expires. Types not listed never expire.
    retention_days: dict[str, int | None] = pydantic.Field(default_factory=lambda: dict(DEFAULT_RETENTION_DAYS))
    probe_interval_s: float = pydantic.Field(5.0, gt=0)
    probe_timeout_s: float = pydantic.Field(1.0, gt=0)
    dedup: DedupConfig = DedupConfig()
    decay: DecayConfig = DecayConfig()
    mem0_api: Mem0ApiConfig = Mem0ApiConfig()

    @pydantic.field_validator("retention_days")
    @classmethod
    def _known_types(cls, value: dict[str, int | None]) -> dict[str, int | None]:
        from layers.conversation.policy.rules import FIXED_PERMANENT, MEMORY_TYPES

        for name, days in value.items():
            if name not in MEMORY_TYPES:
                raise ValueError(f"unknown memory type {shown(name)} (types: {', '.join(MEMORY_TYPES)})")
            if name in FIXED_PERMANENT and days is not None:
                raise ValueError(f"{name} memories never expire; remove it or set it to null")
            if days is not None and days < 1:
                raise ValueError(f"{name}: a retention is at least 1 day (null: never expires)")
        return value

    @pydantic.model_validator(mode="after")
    def _hub_given(self) -> ConversationConfig:
        if self.backend == "hub" and self.hub is None:
            raise ValueError("conversation.backend hub needs conversation.hub: {url: http://HOST:PORT, key_file: PATH}")
        return self


class LogConfig(StrictModel):
    level: Annotated[Literal["debug", "info", "warning", "error"], YAML_CHOICE] = "info"
    # text: one line per record; json: one JSON object per line (under systemd, journald's native
    # fields either way: daemon/common/logs.py)
    format: Annotated[Literal["text", "json"], YAML_CHOICE] = "text"


class MetricsConfig(StrictModel):
    """``/metrics``, ``/healthz`` and ``/readyz`` are always on the Unix socket; ``port`` serves them
    (and only them) on a loopback address too, for a Prometheus that cannot read a socket."""

    port: int | None = pydantic.Field(None, ge=1, le=65535)
    host: Annotated[Literal["127.0.0.1", "::1"], YAML_CHOICE] = "127.0.0.1"


class ConfigFile(StrictModel):
    version: Literal[1] = 1
    paths: PathsConfig = PathsConfig()
    watch: WatchConfig = WatchConfig()
    git: GitConfig = GitConfig()
    fleet: FleetConfig = FleetConfig()
    daily: DailyConfig = DailyConfig()
    core: CoreConfig = CoreConfig()
    guard: GuardConfig = GuardConfig()
    vectors: VectorsConfig = VectorsConfig()
    conversation: ConversationConfig = ConversationConfig()
    log: LogConfig = LogConfig()
    metrics: MetricsConfig = MetricsConfig()

    @pydantic.model_validator(mode="after")
    def _silent_after_reports(self) -> ConfigFile:
        silent, every = self.fleet.silent_after_s, self.git.status_interval_s
        if silent is not None and silent < 2 * every:
            raise ValueError(
                f"fleet.silent_after_s ({silent:g}) must be at least twice git.status_interval_s ({every:g}): "
                "a host reporting on time would be shown SILENT"
            )
        return self


@dataclass(frozen=True)
class Config:
    """What the daemon and the CLI run on: the validated file plus resolved paths."""

    file: ConfigFile
    paths: Paths
    source: Path | None  # None: built-in defaults, no file

    @property
    def watch(self) -> WatchConfig:
        return self.file.watch

    @property
    def git(self) -> GitConfig:
        return self.file.git

    @property
    def daily(self) -> DailyConfig:
        return self.file.daily

    @property
    def fleet(self) -> FleetConfig:
        return self.file.fleet

    @property
    def silent_after_s(self) -> float:
        """``fleet.silent_after_s``, else 15 minutes or twice ``git.status_interval_s`` (the longer)."""
        if self.fleet.silent_after_s is not None:
            return self.fleet.silent_after_s
        return max(DEFAULT_SILENT_AFTER_S, 2 * self.git.status_interval_s)

    @property
    def host_name(self) -> str:
        """This host's name on the remote: ``fleet.host``, else the hostname (lower-cased, up to its
        first dot); ValueError when the hostname cannot be one (then set ``fleet.host``)."""
        if self.fleet.host:
            return self.fleet.host
        name = socket.gethostname().split(".")[0].lower()
        try:
            return check_host_name(name)
        except ValueError as exc:
            raise ValueError(f"the hostname {exc}: set fleet.host in the configuration") from None

    def config_file_path(self, value: str | None) -> Path | None:
        """A path setting (``git.remote_key_file``...): ``~`` expanded, relative to the configuration file."""
        if not value:
            return None
        path = Path(os.path.expanduser(value))
        base = self.source.parent if self.source else Path("/")
        return path if path.is_absolute() else base / path

    @property
    def core(self) -> CoreConfig:
        return self.file.core

    @property
    def guard(self) -> GuardConfig:
        return self.file.guard

    @property
    def vectors(self) -> VectorsConfig:
        return self.file.vectors

    @property
    def model_path(self) -> Path:
        """The local GGUF model: ``vectors.model_path`` or the built default."""
        configured = self.file.vectors.model_path
        if not configured:
            return DEFAULT_MODEL_PATH
        path = Path(os.path.expanduser(configured))
        base = self.source.parent if self.source else Path("/")
        return path if path.is_absolute() else base / path

    @property
    def conversation(self) -> ConversationConfig:
        return self.file.conversation

    @property
    def log(self) -> LogConfig:
        return self.file.log

    @property
    def metrics(self) -> MetricsConfig:
        return self.file.metrics


_SECRET_KEY_RE = re.compile(r"(?i)(api_?key|secret|password|passwd|token)$")


def _secret_keys(data: object, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Key paths whose name says "secret" and whose value is inline (not *_env/*_file)."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = (*path, str(key))
            if isinstance(value, (dict, list)):
                found.extend(_secret_keys(value, here))
            elif _SECRET_KEY_RE.search(str(key)) and value not in (None, ""):
                found.append(here)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found.extend(_secret_keys(item, (*path, i)))
    return found


def _resolve_paths(raw: PathsConfig, base: Path, source: Path, node: yaml.Node | None) -> Paths:
    values = raw.model_dump()
    if raw.index == DEFAULT_INDEX:
        values["legacy_index"] = LEGACY_DEFAULT_INDEX
    # Resolution order is root, workspace, the rest: each may use the ones before it (protocol/locations.py).
    keys = (*TEMPLATED, "agents_dir", "state_dir", "socket", "registry", "audit_dir", "index")
    resolved = resolve_paths(values, base, keys + (("legacy_index",) if "legacy_index" in values else ()))
    for key in resolved:
        leftover = re.findall(r"\{(\w+)\}", resolved[key].replace("{agent}", ""))
        if leftover:
            raise YamlFileError(
                source,
                [Problem(f"paths.{key}", line_of(node, ("paths", key)), f"unknown template {{{leftover[0]}}}")],
            )
    if len(resolved["socket"].encode()) > MAX_SOCKET_PATH:
        raise YamlFileError(
            source,
            [
                Problem(
                    "paths.socket",
                    line_of(node, ("paths", "socket")),
                    f"a Unix socket path is limited to {MAX_SOCKET_PATH} bytes; use a shorter one",
                )
            ],
        )
    if "{agent}" not in resolved["index"]:
        raise YamlFileError(
            source,
            [Problem("paths.index", line_of(node, ("paths", "index")), "must contain {agent}: one index per agent")],
        )
    return Paths(
        root=Path(resolved["root"]),
        workspace=Path(resolved["workspace"]),
        agents_dir=Path(resolved["agents_dir"]),
        index_template=resolved["index"],
        state_dir=Path(resolved["state_dir"]),
        socket=Path(resolved["socket"]),
        registry=Path(resolved["registry"]),
        audit_dir=Path(resolved["audit_dir"]),
        legacy_index_template=resolved.get("legacy_index"),
    )


def parse_config(text: str, source: Path) -> Config:
    """Validate configuration ``text`` read from ``source``."""
    data, node = read_yaml(source, text)
    secrets = _secret_keys(data)
    if secrets:
        raise YamlFileError(
            source,
            [
                Problem(
                    format_key(key),
                    line_of(node, key),
                    "secrets do not belong in the configuration file: name an environment "
                    "variable (…_env) or a file (…_file) instead",
                )
                for key in secrets
            ],
        )
    model = validate(ConfigFile, data, source, node)
    return Config(model, _resolve_paths(model.paths, source.parent, source, node), source)


def load_config(path: Path | None = None) -> Config:
    """Load the configuration: ``path``, else ``$MEMSTRATA_CONFIG``, else the system file.

    With none of them present the built-in defaults (OpenClaw's layout) apply.
    """
    path = config_path(path)  # the one rule, shared with the front's cache
    if path is None:
        model = ConfigFile()
        return Config(model, _resolve_paths(model.paths, Path("/"), Path("<defaults>"), None), None)
    try:
        text = read_text(path)  # bounded, never blocks (a FIFO is refused), UTF-8 checked
    except FileNotFoundError:
        raise YamlFileError(path, [Problem("", None, "configuration file not found")]) from None
    return parse_config(text, path)


def _pattern_yaml(p: SecretPattern) -> str:
    """One rule as the demo configuration spells it out."""
    pattern = yaml.safe_dump(p.pattern, default_style=chr(39), allow_unicode=True, width=1 << 16).strip()
    lines = [f"    - name: {p.name}", f"      pattern: {pattern}"]
    if p.keywords:
        keywords = yaml.safe_dump(p.keywords, default_flow_style=True, allow_unicode=True, width=1 << 16).strip()
        lines.append(f"      keywords: {keywords}")
    if p.min_entropy is not None:
        lines.append(f"      min_entropy: {p.min_entropy:g}")
    return "\n".join(lines)


#: Where ``init`` keeps memstrata's own state in an OpenClaw state dir (one holding ``openclaw.json``):
#: a folder of its own, not OpenClaw's ``state/`` (its databases) nor a ``run/`` beside it.
OPENCLAW_OWN_DIR = "memstrata"


def demo_config_text(root: Path) -> str:
    """The file ``memstrata init --root DIR`` writes: every path under DIR, defaults spelled out.

    In an OpenClaw state dir (DIR holds ``openclaw.json``), the state directory and the socket are
    in ``DIR/memstrata/``: OpenClaw keeps its own databases in ``DIR/state``. An existing file names
    its paths, so an install made before keeps its ``{root}/state``."""
    state = "{root}/state"
    socket = "{root}/run/memstrata.sock"
    if (root / "openclaw.json").exists():
        state, socket = f"{{root}}/{OPENCLAW_OWN_DIR}/state", f"{{root}}/{OPENCLAW_OWN_DIR}/run/memstrata.sock"
    patterns = "\n".join(_pattern_yaml(p) for p in DEFAULT_NEVER_STORE)
    retention = ", ".join(f"{k}: {'null' if v is None else v}" for k, v in DEFAULT_RETENTION_DAYS.items())
    return f"""\
# memstrata configuration (written by `memstrata init --root {root}`).
# Relative paths are relative to this file. Secrets never go here: name an
# environment variable (…_env) or a file (…_file) instead.
version: 1

paths:
  root: .
  workspace: "{{root}}/workspace"
  agents_dir: "{{workspace}}/agents"
  index: "{{root}}/agents/{{agent}}/memstrata/index.sqlite"  # a file of memstrata's own (never QMD's index.sqlite)
  state_dir: "{state}"
  socket: "{socket}"
  registry: "{{workspace}}/skills/mem0-integration/project_registry.yaml"
  audit_dir: "{{workspace}}/logs/security"

watch:
  mode: auto               # auto | inotify | polling (auto falls back to polling when inotify runs out)
  debounce_ms: 300         # per-file quiet time before a change is processed
  reconcile_interval_s: 300
  max_file_mb: 5           # larger files are never read: neither versioned nor indexed (status lists them)

git:
  quiet_period_s: 5        # commit after this long without changes…
  max_delay_s: 60          # …but never later than this after the first change

daily:
  archive_after_days: null # e.g. 30 moves older memory/YYYY-MM-DD.md to memory/archive/YYYY/

core:
  budget_tokens: 6000

guard:
  never_store:             # files matching any of these are held back from git commits and not indexed
{patterns}

vectors:                   # L3 local vectors, loaded on demand
  backend: local           # local (GGUF via llama.cpp) | openai (OpenAI-compatible endpoint) | off
  model_path: null         # null: the model `memstrata model build` wrote (multilingual-e5-small)
  profile: e5              # query/passage prefixes: e5 | bge-zh | plain
  min_free_mb: 300         # load only when this much memory stays free besides the model
  idle_unload_s: 120
  unload: pressure         # pressure: kept loaded while memory is plentiful | idle: also after idle_unload_s

conversation:              # L4: the shared Mem0/Qdrant memory
  enabled: true
  backend: embedded        # embedded (a Qdrant Edge shard under state_dir) | remote (a Qdrant server)
  qdrant:                  # used when backend is remote, e.g. the central node over Tailscale
    url: http://100.115.94.1:6333
    api_key_env: null      # name of the environment variable holding the API key
    timeout_s: 5
    collection: mem0_v4_shared
  llm: null                # {{base_url, model, api_key_env}}: lets writes use mem0's inference
  retention_days: {{{retention}}}
  dedup:                   # infer off: an exact duplicate returns the existing id (NOOP)
    enabled: true
    near_threshold: null   # e5 cosine at which a near duplicate UPDATEs the existing memory (off: see DedupConfig)
  decay:                   # decay by use: importance = e^(-ln2 x age / half-life), slowed by access_count
    half_life_days: {{}}     # per type, days; defaults session 2, chat_summary 10, task_log 30, procedure 90
    archive_below: 0.1     # the cleanup archives (hides, keeps) a memory that faded below this
    rank_weight: 0.02      # score x (1 - w + w x importance); 0: relevance alone (bench/bench_decay.py)

log:
  level: info
"""
