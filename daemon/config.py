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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pydantic
import yaml

from layers.yamlfile import (
    Problem,
    StrictModel,
    YamlFileError,
    format_key,
    line_of,
    read_text,
    read_yaml,
    validate,
)

ENV_VAR = "MEMSTRATA_CONFIG"
SYSTEM_CONFIG = Path("/etc/memstrata/memstrata.yaml")
# Where `memstrata model build` writes the default local model: inside the install,
# so the service's virtualenv carries it.
DEFAULT_MODEL_PATH = Path(sys.prefix) / "share" / "memstrata" / "models" / "multilingual-e5-small-q4_0.gguf"
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL


class PathsConfig(StrictModel):
    root: str = "/root/.openclaw"
    workspace: str = "{root}/workspace"
    agents_dir: str = "{workspace}/agents"
    index: str = "{root}/agents/{agent}/qmd/xdg-cache/qmd/index.sqlite"
    state_dir: str = "/var/lib/memstrata"
    socket: str = "/run/memstrata/memstrata.sock"
    registry: str = "{workspace}/skills/mem0-integration/project_registry.yaml"
    audit_dir: str = "{workspace}/logs/security"


class WatchConfig(StrictModel):
    mode: Literal["auto", "inotify", "polling"] = "auto"
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


class DailyConfig(StrictModel):
    archive_after_days: int | None = pydantic.Field(None, ge=1)


class CoreConfig(StrictModel):
    budget_tokens: int = pydantic.Field(6000, ge=1)


class SecretPattern(StrictModel):
    name: str
    pattern: str

    @pydantic.field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


DEFAULT_NEVER_STORE: tuple[SecretPattern, ...] = tuple(
    SecretPattern(name=n, pattern=p)
    for n, p in (
        ("api_key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
        ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
        ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("password", r"(?i)\b(?:password|passwd|pwd)\s*[=:]\s*\S+"),
        ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
        ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
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

    backend: Literal["local", "openai", "off"] = "local"
    model_path: str | None = None  # None: the model `memstrata model build` writes
    profile: Literal["e5", "bge-zh", "plain"] = "e5"
    min_free_mb: int = pydantic.Field(300, ge=0)
    idle_unload_s: float = pydantic.Field(120.0, gt=0)
    batch_size: int = pydantic.Field(16, ge=1, le=512)
    threads: int = pydantic.Field(2, ge=1, le=64)
    openai: OpenAIEmbeddingConfig = OpenAIEmbeddingConfig()


class QdrantConfig(StrictModel):
    """The Qdrant server L4 uses when ``conversation.backend`` is ``remote``."""

    url: str = "http://100.115.94.1:6333"
    api_key_env: str | None = None  # environment variable holding the server's API key
    api_key_file: str | None = None  # …or a file holding it
    timeout_s: float = pydantic.Field(5.0, gt=0, le=120)
    collection: str = pydantic.Field("mem0_v4_shared", pattern=r"^[A-Za-z0-9_-]{1,128}$")


class LlmConfig(StrictModel):
    """An OpenAI-compatible chat endpoint; when set, writes may use mem0's inference."""

    base_url: str
    model: str
    api_key_env: str = "LLM_API_KEY"


class ConversationConfig(StrictModel):
    """L4: the shared Mem0/Qdrant memory, brokered by the daemon."""

    enabled: bool = True
    backend: Literal["embedded", "remote"] = "embedded"
    qdrant: QdrantConfig = QdrantConfig()
    llm: LlmConfig | None = None
    # Days a memory of each type lives; null never expires. Types not listed never expire.
    retention_days: dict[str, int | None] = pydantic.Field(
        default_factory=lambda: {"session": 7, "chat_summary": 30, "procedure": None, "task_log": 30}
    )
    probe_interval_s: float = pydantic.Field(5.0, gt=0)
    probe_timeout_s: float = pydantic.Field(1.0, gt=0)

    @pydantic.field_validator("retention_days")
    @classmethod
    def _known_types(cls, value: dict[str, int | None]) -> dict[str, int | None]:
        from layers.conversation.policy import FIXED_PERMANENT, MEMORY_TYPES

        for name, days in value.items():
            if name not in MEMORY_TYPES:
                raise ValueError(f"unknown memory type {name!r} (types: {', '.join(MEMORY_TYPES)})")
            if name in FIXED_PERMANENT and days is not None:
                raise ValueError(f"{name} memories never expire; remove it or set it to null")
            if days is not None and days < 1:
                raise ValueError(f"{name}: a retention is at least 1 day (null: never expires)")
        return value


class LogConfig(StrictModel):
    level: Literal["debug", "info", "warning", "error"] = "info"


class ConfigFile(StrictModel):
    version: Literal[1] = 1
    paths: PathsConfig = PathsConfig()
    watch: WatchConfig = WatchConfig()
    git: GitConfig = GitConfig()
    daily: DailyConfig = DailyConfig()
    core: CoreConfig = CoreConfig()
    guard: GuardConfig = GuardConfig()
    vectors: VectorsConfig = VectorsConfig()
    conversation: ConversationConfig = ConversationConfig()
    log: LogConfig = LogConfig()


@dataclass(frozen=True)
class Paths:
    """Absolute paths after templates and relative paths are resolved."""

    root: Path
    workspace: Path
    agents_dir: Path
    index_template: str
    state_dir: Path
    socket: Path
    registry: Path
    audit_dir: Path

    def index_for(self, agent: str) -> Path:
        return Path(self.index_template.replace("{agent}", agent))


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


_SECRET_KEY_RE = re.compile(r"(?i)(api_?key|secret|password|passwd|token)$")


def _secret_keys(data: object, path: tuple = ()) -> list[tuple]:
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
    resolved: dict[str, str] = {}

    def expand(key: str) -> str:
        # Resolution order is root, workspace, the rest: each may use the ones before it.
        text = values[key]
        for name in ("root", "workspace"):
            if name in resolved:
                text = text.replace("{" + name + "}", resolved[name])
        text = os.path.expanduser(text)
        if not os.path.isabs(text):
            text = str(base / text)
        return os.path.normpath(text)

    for key in ("root", "workspace", "agents_dir", "state_dir", "socket", "registry", "audit_dir", "index"):
        resolved[key] = expand(key)
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
    if path is None and os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
    if path is None and SYSTEM_CONFIG.exists():
        path = SYSTEM_CONFIG
    if path is None:
        model = ConfigFile()
        return Config(model, _resolve_paths(model.paths, Path("/"), Path("<defaults>"), None), None)
    path = path.expanduser().absolute()
    try:
        text = read_text(path)  # bounded, never blocks (a FIFO is refused), UTF-8 checked
    except FileNotFoundError:
        raise YamlFileError(path, [Problem("", None, "configuration file not found")]) from None
    return parse_config(text, path)


def demo_config_text(root: Path) -> str:
    """The file ``memstrata init --root DIR`` writes: every path under DIR, defaults spelled out."""
    patterns = "\n".join(
        f"    - name: {p.name}\n      pattern: {yaml.safe_dump(p.pattern, default_style=chr(39)).strip()}"
        for p in DEFAULT_NEVER_STORE
    )
    return f"""\
# memstrata configuration (written by `memstrata init --root {root}`).
# Relative paths are relative to this file. Secrets never go here: name an
# environment variable (…_env) or a file (…_file) instead.
version: 1

paths:
  root: .
  workspace: "{{root}}/workspace"
  agents_dir: "{{workspace}}/agents"
  index: "{{root}}/agents/{{agent}}/qmd/xdg-cache/qmd/index.sqlite"
  state_dir: "{{root}}/state"
  socket: "{{root}}/run/memstrata.sock"
  registry: "{{root}}/project_registry.yaml"
  audit_dir: "{{workspace}}/logs/security"

watch:
  mode: auto               # auto | inotify | polling (auto falls back to polling when inotify runs out)
  debounce_ms: 300         # per-file quiet time before a change is processed
  reconcile_interval_s: 300
  max_file_mb: 5           # larger files are versioned but not indexed

git:
  quiet_period_s: 5        # commit after this long without changes…
  max_delay_s: 60          # …but never later than this after the first change

daily:
  archive_after_days: null # e.g. 30 moves older memory/YYYY-MM-DD.md to memory/archive/YYYY/

core:
  budget_tokens: 6000

guard:
  never_store:             # files matching any of these are held back from git commits
{patterns}

vectors:                   # L3 local vectors, loaded on demand
  backend: local           # local (GGUF via llama.cpp) | openai (OpenAI-compatible endpoint) | off
  model_path: null         # null: the model `memstrata model build` wrote (multilingual-e5-small)
  profile: e5              # query/passage prefixes: e5 | bge-zh | plain
  min_free_mb: 300         # load only when this much memory stays free besides the model
  idle_unload_s: 120

conversation:              # L4: the shared Mem0/Qdrant memory
  enabled: true
  backend: embedded        # embedded (Qdrant local storage under state_dir) | remote (a Qdrant server)
  qdrant:                  # used when backend is remote, e.g. the central node over Tailscale
    url: http://100.115.94.1:6333
    api_key_env: null      # name of the environment variable holding the API key
    timeout_s: 5
    collection: mem0_v4_shared
  llm: null                # {{base_url, model, api_key_env}}: lets writes use mem0's inference
  retention_days: {{session: 7, chat_summary: 30, procedure: null, task_log: 30}}

log:
  level: info
"""
