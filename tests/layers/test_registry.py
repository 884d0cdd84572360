"""The project registry: validation names key and line; membership resolves both ways."""

from __future__ import annotations

import os

import pytest
import yaml

from layers.common.yamlfile import YamlFileError
from layers.conversation.policy.registry import HEADER, RegistryCache, RegistryFile, add_agent, load_registry


def test_membership_is_the_union_of_both_sides(tmp_path):
    path = tmp_path / "project_registry.yaml"
    path.write_text(
        "projects:\n  infra:\n    members: [ops]\n    keywords: [qdrant]\n  web: {}\n"
        "agents:\n  ops: {}\n  dev:\n    projects: [infra, web]\n    can_write_public: true\n"
    )
    reg = load_registry(path)
    assert reg.members_of("infra") == {"ops", "dev"}
    assert reg.projects_of("dev") == {"infra", "web"}
    assert reg.can_write_public("dev") and not reg.can_write_public("ops")
    assert reg.keywords()["infra"] == ["qdrant"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("agents:\n  ops:\n    projects: [ghost]\n", "agents.ops.projects[0] (line 3): unknown project 'ghost'"),
        ("agents:\n  ops:\n    can_write_public: 'yes'\n", "agents.ops.can_write_public (line 3)"),
        ("projects:\n  infra:\n    memberz: []\n", "projects.infra.memberz (line 3): unknown key"),
        ("agents:\n  ../root: {}\n", "(key) (line 2)"),
    ],
)
def test_errors_name_key_and_line(tmp_path, text, expected):
    path = tmp_path / "project_registry.yaml"
    path.write_text(text)
    with pytest.raises(YamlFileError) as info:
        load_registry(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_add_agent_is_atomic_and_keeps_existing_entries(tmp_path):
    path = tmp_path / "project_registry.yaml"
    add_agent(path, "ops", ["infra"])
    add_agent(path, "dev", ["infra", "web"])
    add_agent(path, "ops", ["infra"])  # again: no duplicates
    reg = load_registry(path)
    assert reg.members_of("infra") == {"ops", "dev"}
    assert reg.data.projects["infra"].members == ["ops", "dev"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project_registry.yaml", "project_registry.yaml.lock"]


def _changed(path, text: str | None) -> None:
    """Write (or with None remove) ``path`` as a new version the cache must notice (a later mtime)."""
    if text is None:
        path.unlink()
        return
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


@pytest.mark.parametrize(("half_written", "says"), [("", "empty"), ("# header only\n", "empty"), (None, "no longer")])
def test_a_registry_with_no_document_is_refused_while_agents_are_in_force(tmp_path, half_written, says):
    """A writer that truncates first (or an editor that deletes and recreates) leaves no document for a moment:
    refused while agents are in force, said in ``error``; the file's next change is read again."""
    path = tmp_path / "project_registry.yaml"
    add_agent(path, "ops", ["infra"])
    cache = RegistryCache(path)
    _changed(path, half_written)
    assert cache.current().members_of("infra") == {"ops"}
    assert str(path) in cache.error and "refused" in cache.error and says in cache.error
    assert "previous registry stays in force" in cache.error
    _changed(path, "projects:\n  infra:\n    members: [ops, dev]\n")  # the completing write
    assert cache.current().members_of("infra") == {"ops", "dev"} and cache.error == ""


def test_an_empty_registry_written_as_a_document_is_applied(tmp_path):
    """Emptying the registry on purpose is a valid document with no agents (as the library writes one)."""
    path = tmp_path / "project_registry.yaml"
    add_agent(path, "ops", ["infra"])
    cache = RegistryCache(path)
    _changed(path, HEADER + yaml.safe_dump(RegistryFile().model_dump(), sort_keys=False))
    assert cache.current().agent_ids() == [] and cache.error == ""
    _changed(path, "")  # nothing in force to keep: an empty file is an empty registry, as at start
    assert cache.current().agent_ids() == [] and cache.error == ""
