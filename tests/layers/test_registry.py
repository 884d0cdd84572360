"""The project registry: validation names key and line; membership resolves both ways."""

from __future__ import annotations

import pytest

from layers.common.yamlfile import YamlFileError
from layers.conversation.policy.registry import add_agent, load_registry


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
