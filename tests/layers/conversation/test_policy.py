"""Placement, lifetime and read phases: the rules that keep private memory private."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from layers.conversation.policy.registry import load_registry
from layers.conversation.policy.rules import (
    MEMORY_TYPES,
    ForbiddenError,
    PolicyError,
    lifetime,
    may_read,
    place,
    read_phases,
)

REGISTRY = """\
projects:
  infra:
    members: [ops]
    keywords: [qdrant, Tailscale]
  web:
    keywords: [react]
agents:
  ops: {}
  dev:
    projects: [web]
  hub:
    can_write_public: true
"""


@pytest.fixture
def registry(tmp_path):
    path = tmp_path / "project_registry.yaml"
    path.write_text(REGISTRY)
    return load_registry(path)


def test_explicit_placements_follow_membership_and_permission(registry):
    assert place(registry, "ops", "x", "project", "infra").project_id == "infra"
    assert place(registry, "hub", "x", "public").visibility == "public"
    assert place(registry, "dev", "x", "private").visibility == "private"
    assert place(registry, "ops", "x", None, "infra").visibility == "project"  # a project implies project visibility
    with pytest.raises(ForbiddenError, match="not a member of project 'infra'"):
        place(registry, "dev", "x", "project", "infra")
    with pytest.raises(ForbiddenError, match="may not write public"):
        place(registry, "ops", "x", "public")
    with pytest.raises(PolicyError, match="unknown visibility"):
        place(registry, "ops", "x", "everyone")
    with pytest.raises(PolicyError, match="needs a project id"):
        place(registry, "ops", "x", "project")


def test_inferred_placement_uses_keywords_of_own_projects_and_never_guesses_public(registry):
    guessed = place(registry, "ops", "今天把 QDRANT 迁移到新节点")
    assert (guessed.visibility, guessed.project_id, guessed.inferred) == ("project", "infra", True)
    # dev is not in infra: the keyword does not move its memory into that project
    assert place(registry, "dev", "qdrant tuning notes").visibility == "private"
    assert place(registry, "dev", "the react app").project_id == "web"
    # hub may write public, but only when it says so
    assert place(registry, "hub", "cluster-wide fact").visibility == "private"


def test_lifetime_by_type_and_explicit_date():
    created = datetime(2026, 11, 30, 23, 30, tzinfo=timezone.utc)
    retention = {"session": 7, "chat_summary": 30, "task_log": 3, "procedure": None}
    assert lifetime("session", retention, created).expiration_date == "2026-12-07"
    assert lifetime("chat_summary", retention, created).expiration_date == "2026-12-30"
    assert lifetime("task_log", retention, created).expiration_date == "2026-12-03"
    for permanent in ("preference", "knowledge", "fact", "lesson", "decision", "procedure"):
        assert lifetime(permanent, retention, created).expiration_date is None
    # permanent types stay permanent even if someone configures a retention for them
    assert lifetime("knowledge", {"knowledge": 1}, created).expires_at is None
    explicit = lifetime("knowledge", retention, created, expires="2027-01-31")
    assert explicit.expiration_date == "2027-01-31"
    # shown through the whole last day (UTC), like mem0's own date check
    assert explicit.expires_at == datetime(2027, 2, 1, tzinfo=timezone.utc).timestamp()
    with pytest.raises(PolicyError, match="unknown memory type"):
        lifetime("gossip", retention, created)
    with pytest.raises(PolicyError, match="date like"):
        lifetime("session", retention, created, expires="next week")
    assert set(MEMORY_TYPES) >= {"session", "chat_summary", "preference", "knowledge", "procedure", "task_log"}


def test_read_phases_and_may_read(registry):
    phases = read_phases(registry, "ops")
    assert [p.name for p in phases] == ["public", "project", "private"]
    assert phases[1].projects == ("infra",)
    assert phases[2].mem0_filters() == {"agent_id": "ops", "visibility": "private"}
    assert phases[0].mem0_filters() == {"agent_id": "*", "visibility": "public"}
    assert [p.name for p in read_phases(registry, "hub")] == ["public", "private"]  # no projects, no project phase

    private_of_ops = {"visibility": "private", "agent_id": "ops"}
    infra = {"visibility": "project", "project_id": "infra", "agent_id": "ops"}
    assert may_read(registry, "ops", private_of_ops) and may_read(registry, "ops", infra)
    assert not may_read(registry, "dev", private_of_ops)
    assert not may_read(registry, "dev", infra)
    assert may_read(registry, "dev", {"visibility": "public", "agent_id": "ops"})
    assert not may_read(registry, "dev", {"agent_id": "dev"})  # a memory without a visibility is shown to no one


def test_a_spokes_agent_is_a_member_as_host_slash_agent_and_no_one_else(tmp_path):
    """On the fleet's hub, agent b of spoke-1 is ``spoke-1/b`` (docs/fleet-l4.md): a member by that name
    only; ``b`` and ``spoke-2/b`` are other agents."""
    from layers.common.yamlfile import YamlFileError

    path = tmp_path / "project_registry.yaml"
    path.write_text(
        "projects:\n  infra:\n    members: [ops, spoke-1/b]\nagents:\n  spoke-1/main: {projects: [infra]}\n"
    )
    registry = load_registry(path)
    assert registry.members_of("infra") == {"ops", "spoke-1/b", "spoke-1/main"}
    infra = {"visibility": "project", "project_id": "infra", "agent_id": "ops"}
    assert may_read(registry, "spoke-1/b", infra) and may_read(registry, "spoke-1/main", infra)
    assert not may_read(registry, "b", infra) and not may_read(registry, "spoke-2/b", infra)
    assert may_read(registry, "spoke-1/b", {"visibility": "private", "agent_id": "spoke-1/b"})
    assert not may_read(registry, "spoke-2/b", {"visibility": "private", "agent_id": "spoke-1/b"})
    for bad in ("a/b/c", "/b", "a/", "A/b", "a/../b", "spoke-1/B"):
        path.write_text(f"projects:\n  infra:\n    members: ['{bad}']\n")
        with pytest.raises(YamlFileError):
            load_registry(path)
    path.write_text("projects:\n  spoke-1/infra: {}\n")  # a project's name stays a plain id
    with pytest.raises(YamlFileError):
        load_registry(path)
