"""Configuration errors name the file, the key path and the line; secrets are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.common.config import load_config, parse_config
from layers.common.yamlfile import YamlFileError
from tests.helpers import init_root, run_cli


def _error(text: str, tmp_path: Path) -> str:
    path = tmp_path / "memstrata.yaml"
    path.write_text(text)
    with pytest.raises(YamlFileError) as info:
        load_config(path)
    return str(info.value)


def test_unknown_key_names_file_key_and_line(tmp_path):
    message = _error("version: 1\nwatch:\n  debounce_ms: 200\n  debounse: 3\n", tmp_path)
    assert str(tmp_path / "memstrata.yaml") in message
    assert "watch.debounse (line 4): unknown key" in message


def test_wrong_type_names_key_and_line(tmp_path):
    message = _error("git:\n  quiet_period_s: soon\n", tmp_path)
    assert "git.quiet_period_s (line 2)" in message
    assert "number" in message


def test_nested_list_error_and_missing_value(tmp_path):
    message = _error("guard:\n  never_store:\n    - name: a\n      pattern: 'x'\n    - name: b\n", tmp_path)
    assert "guard.never_store[1].pattern (line 5): required value is missing" in message


def test_invalid_regex_and_yaml_syntax_are_located(tmp_path):
    assert "guard.never_store[0].pattern (line 4)" in _error(
        "guard:\n  never_store:\n    - name: a\n      pattern: '(unclosed'\n", tmp_path
    )
    assert "started at line 2" in _error("watch:\n  debounce_ms: [1\n", tmp_path)
    assert "duplicate key" in _error("watch:\n  debounce_ms: 1\nwatch:\n  mode: auto\n", tmp_path)


def test_secrets_in_the_file_are_refused_without_echoing_them(tmp_path):
    message = _error("paths:\n  root: /x\nqdrant_api_key: hunter2-secret\n", tmp_path)
    assert "qdrant_api_key (line 3)" in message and "environment variable" in message
    assert "hunter2-secret" not in message


def test_defaults_follow_the_openclaw_layout(monkeypatch):
    monkeypatch.delenv("MEMSTRATA_CONFIG", raising=False)
    config = load_config(None) if not Path("/etc/memstrata/memstrata.yaml").exists() else None
    if config is None:
        pytest.fail("a system config exists on this machine; the defaults test needs a clean host")
    paths = config.paths
    assert str(paths.workspace) == "/root/.openclaw/workspace"
    assert str(paths.agents_dir) == "/root/.openclaw/workspace/agents"
    assert str(paths.index_for("ops")) == "/root/.openclaw/agents/ops/memstrata/index.sqlite"
    assert str(paths.state_dir) == "/var/lib/memstrata"
    assert str(paths.socket) == "/run/memstrata/memstrata.sock"


def test_templates_and_relative_paths_resolve_against_the_file(tmp_path):
    config = parse_config("paths:\n  root: data\n  state_dir: '{root}/st'\n", tmp_path / "c.yaml")
    assert config.paths.root == tmp_path / "data"
    assert config.paths.state_dir == tmp_path / "data" / "st"
    assert config.paths.workspace == tmp_path / "data" / "workspace"


def test_socket_path_too_long_is_an_error(tmp_path):
    assert "paths.socket (line 2)" in _error("paths:\n  socket: /" + "s" * 120 + "\n", tmp_path)


def test_init_is_idempotent_and_every_path_is_under_the_root(tmp_path):
    config_path = init_root(tmp_path)
    config = load_config(config_path)
    for name in ("workspace", "agents_dir", "state_dir", "socket", "registry", "audit_dir"):
        assert tmp_path in getattr(config.paths, name).parents, name
    assert tmp_path in config.paths.index_for("main").parents
    (tmp_path / "workspace" / "SOUL.md").write_text("mine\n")
    before = config_path.read_text()
    second = run_cli("init", "--root", str(tmp_path))
    assert "kept" in second.stdout
    assert config_path.read_text() == before
    assert (tmp_path / "workspace" / "SOUL.md").read_text() == "mine\n"


def test_cli_reports_config_errors_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("log:\n  level: loud\n")
    proc = run_cli("status", config=bad, check=False)
    assert proc.returncode == 1
    assert "log.level (line 2)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_conversation_settings_are_validated(tmp_path):
    with pytest.raises(YamlFileError, match=r"conversation.retention_days \(line 2\).*unknown memory type 'gossip'"):
        parse_config("conversation:\n  retention_days:\n    gossip: 3\n", tmp_path / "m.yaml")
    with pytest.raises(YamlFileError, match="knowledge memories never expire"):
        parse_config("conversation:\n  retention_days: {knowledge: 30}\n", tmp_path / "m.yaml")
    with pytest.raises(YamlFileError, match=r"conversation.backend \(line 2\)"):
        parse_config("conversation:\n  backend: cloud\n", tmp_path / "m.yaml")
    with pytest.raises(YamlFileError, match="secrets do not belong"):
        parse_config("conversation:\n  qdrant:\n    api_key: abc\n", tmp_path / "m.yaml")
    config = parse_config("conversation:\n  retention_days: {task_log: 14}\n", tmp_path / "m.yaml")
    assert config.conversation.retention_days == {"task_log": 14}
    assert config.conversation.qdrant.collection == "mem0_v4_shared"


def _choice_fields(model=None, prefix: tuple[str, ...] = ()):
    """(key path, accepted values) of every enum field of the configuration, nested sections included."""
    import pydantic

    from daemon.common.config import ConfigFile, choices_of

    model = model or ConfigFile
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            yield from _choice_fields(annotation, (*prefix, name))
        elif choices_of(annotation):
            yield (*prefix, name), choices_of(annotation)


def _nested_yaml(key: tuple[str, ...], word: str) -> str:
    lines = [f"{'  ' * depth}{part}:" for depth, part in enumerate(key[:-1])]
    return "\n".join([*lines, f"{'  ' * (len(key) - 1)}{key[-1]}: {word}"]) + "\n"


YAML_BOOLEAN_WORDS = ("on", "off", "yes", "no", "true", "false", "y", "n")
# Every enum value YAML 1.1 reads as a boolean when unquoted: one test each.
BOOLEAN_LOOKING = [
    (key, word) for key, choices in _choice_fields() for word in choices if word.lower() in YAML_BOOLEAN_WORDS
]


def test_every_enum_field_is_found_and_the_boolean_looking_ones_are_listed():
    found = {".".join(key) for key, _ in _choice_fields()}
    assert {"watch.mode", "vectors.backend", "vectors.profile", "conversation.backend", "log.level"} <= found
    assert [(".".join(k), w) for k, w in BOOLEAN_LOOKING] == [
        ("git.remote_host_keys", "yes"),
        ("vectors.backend", "off"),
    ]


def test_the_fleet_settings_name_a_host_and_a_remote(tmp_path):
    text = "git:\n  remote: ssh://git@100.115.94.1/srv/memstrata/fleet.git\n  remote_key_file: keys/fleet\n"
    config = parse_config(text + "fleet:\n  host: spoke-1\n", tmp_path / "m.yaml")
    assert config.host_name == "spoke-1" and config.git.remote_host_keys == "accept-new"
    assert config.config_file_path(config.git.remote_key_file) == tmp_path / "keys" / "fleet"
    assert parse_config("", tmp_path / "m.yaml").git.remote is None, "no remote: no sync"
    for bad, why in (("shared", "shared core"), ("Spoke", "cannot name a host"), ("a.b", "cannot name a host")):
        with pytest.raises(YamlFileError, match=why):
            parse_config(f"fleet:\n  host: {bad}\n", tmp_path / "m.yaml")
    with pytest.raises(YamlFileError, match=r"git.remote \(line 2\)"):
        parse_config("git:\n  remote: --upload-pack=x\n", tmp_path / "m.yaml")


@pytest.mark.parametrize(
    "section",
    [
        "fleet:\n  host: {long}\n",
        "fleet:\n  listen: {long}\n",
        "fleet:\n  listen: {long}:7000\n",
        "conversation:\n  decay:\n    half_life_days:\n      {long}: 3\n",
    ],
)
def test_a_refused_value_is_quoted_cut_not_whole(tmp_path, section):
    """A generated 1,000-character host name came back whole in the error (2,001 characters for one problem):
    refused values are quoted cut, saying how long they were, as every echo is (daemon/common/echo.py)."""
    long = "x" + "é" * 999
    with pytest.raises(YamlFileError) as refused:
        parse_config(section.format(long=long), tmp_path / "m.yaml")
    message = str(refused.value)
    assert long not in message and "(1,000 characters)" in message and len(message) < 600, message


@pytest.mark.parametrize(("key", "word"), BOOLEAN_LOOKING, ids=lambda v: ".".join(v) if isinstance(v, tuple) else v)
def test_an_unquoted_yaml_boolean_word_is_taken_as_the_enum_value(tmp_path, key, word):
    for spelling in (word, word.upper(), word.capitalize()):
        path = tmp_path / "memstrata.yaml"
        path.write_text(_nested_yaml(key, spelling))
        section = load_config(path).file
        for part in key:
            section = getattr(section, part)
        assert section == word, spelling


def test_vectors_backend_off_unquoted_in_the_demo_config(tmp_path):
    config = init_root(tmp_path)
    text = config.read_text()
    assert "  backend: local " in text
    config.write_text(text.replace("  backend: local ", "  backend: off ", 1))
    assert load_config(config).vectors.backend == "off"
    assert "vectors: off" in run_cli("status", config=config, check=False).stdout


def test_a_boolean_where_no_enum_value_reads_as_one_says_so(tmp_path):
    message = _error("conversation:\n  backend: yes\n", tmp_path)
    assert "conversation.backend (line 2)" in message
    assert "read as a boolean" in message and "embedded, remote" in message
