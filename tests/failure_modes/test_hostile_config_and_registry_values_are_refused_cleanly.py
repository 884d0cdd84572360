"""Whatever the configuration or the project registry holds, the answer is a usable file or one clear error.

The two files are entry points of their own (docs/threat-model.md): the operator writes the
configuration, and the registry lives in the main agent's workspace, so the main agent can write it.
The named hostile shapes (anchors, deep nesting, a FIFO, latin-1, 360 KiB) have tests of their own
(hostile_yaml.py, test_hostile_config_on_sighup_keeps_the_running_one.py,
test_hostile_registry_keeps_the_last_good_one.py). Here hypothesis builds documents from the real
keys and hostile values (integers of hundreds of digits, NaN, control and bidi characters, lists
and maps where scalars belong) and checks the whole class: parsing either gives a configuration or
raises :class:`YamlFileError` naming the file, bounded in length; nothing else escapes.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.common.config import parse_config
from layers.common.ids import is_valid_id
from layers.common.yamlfile import YamlFileError
from layers.conversation.policy.registry import load_registry

# Every section and key of memstrata.yaml that takes a value (README, "Configuration").
CONFIG_KEYS = {
    "paths": ["root", "workspace", "agents_dir", "index", "state_dir", "socket", "registry", "audit_dir"],
    "watch": ["debounce_ms", "reconcile_interval_s", "max_file_mb"],
    "git": ["quiet_period_s", "max_delay_s"],
    "daily": ["archive_after_days"],
    "vectors": ["backend", "model_path", "min_free_mb", "idle_unload_s", "unload", "profile"],
    "conversation": ["backend", "retention_days", "decay", "mem0_api", "qdrant", "llm", "enabled", "collection", "hub"],
    "fleet": ["host", "role", "listen"],
    "metrics": ["port", "host"],
    "log": ["format", "level"],
    "guard": ["never_store"],
}
REGISTRY_KEYS = {
    "projects": ["description", "members", "keywords"],
    "agents": ["projects", "can_write_public"],
}

HOSTILE_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from("\x1b\x07\x00\x7f\x85\u202e\u2066\ufeff/..~:#&*!|>'\"\\"),
    ),
    max_size=80,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    HOSTILE_TEXT,
    st.text(min_size=300, max_size=3000),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _sections(keys: dict[str, list[str]]) -> st.SearchStrategy[dict[str, object]]:
    def one(section: str) -> st.SearchStrategy[tuple[str, object]]:
        known = st.sampled_from(keys[section])
        return st.tuples(
            st.just(section),
            st.one_of(VALUES, st.dictionaries(known | HOSTILE_TEXT, VALUES, max_size=4)),
        )

    return st.lists(st.sampled_from(sorted(keys)).flatmap(one), max_size=len(keys)).map(dict)


def _dumped(doc: object) -> str | None:
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError):
        return None  # not a document a YAML emitter can write (hypothesis made an unrepresentable key)


def _refused_cleanly(exc: YamlFileError, path: Path) -> None:
    text = str(exc)
    assert text.startswith(str(path)), text[:300]
    # each problem names its key and line; values are never repeated whole (a 3,000-character value
    # or a 400-digit integer in a message is the echo the limits forbid)
    assert len(text) <= 2_000 * max(1, len(exc.problems)), len(text)


GENERATED = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@GENERATED
@given(doc=_sections(CONFIG_KEYS))
def test_any_configuration_is_usable_or_one_clear_error(tmp_path_factory, doc) -> None:
    text = _dumped(doc)
    if text is None:
        return
    path = tmp_path_factory.mktemp("cfg") / "memstrata.yaml"
    try:
        parse_config(text, path)
    except YamlFileError as exc:
        _refused_cleanly(exc, path)


@GENERATED
@given(doc=_sections(REGISTRY_KEYS) | VALUES)
def test_any_registry_is_usable_or_one_clear_error(tmp_path_factory, doc) -> None:
    text = _dumped(doc)
    if text is None:
        return
    path = tmp_path_factory.mktemp("reg") / "project_registry.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        registry = load_registry(path)
    except YamlFileError as exc:
        _refused_cleanly(exc, path)
        return
    # a registry that loads names only valid agent and project ids (they reach paths and filters); a member
    # may be a spoke's agent as the hub knows it, HOST/AGENT, each part an id (docs/fleet-l4.md)
    for project in registry.data.projects:
        assert is_valid_id(project) and all(_member(m) for m in registry.members_of(project))
    assert all(_member(agent) for agent in registry.agent_ids())


def _member(name: str) -> bool:
    return is_valid_id(name) or (name.count("/") == 1 and all(is_valid_id(part) for part in name.split("/")))
