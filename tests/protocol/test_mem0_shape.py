"""mem0's shape of a memory is one definition: the daemon's mem0 REST app and the skill's Memory show the same.

They had drifted when each wrote its own key lists (the REST app left ``source`` and ``archived`` out).
"""

from __future__ import annotations

from daemon.api.mem0_rest import mem0_view
from protocol.mem0_shape import MEMSTRATA_METADATA, mem0_metadata, memory_type_of
from tests.skills.test_mem0_client import mem0_client

MEMORY = {
    "id": "2f1c0f6e-8d5e-4f9b-9a57-0b8f3f1e2a10",
    "memory": "Deploys go out on Tuesdays",
    "hash": "abc",
    "agent_id": "main",
    "user_id": "alice",
    "created_at": "2026-12-01T10:00:00+00:00",
    "updated_at": None,
    "visibility": "project",
    "project_id": "infra",
    "memory_type": "decision",
    "source": "agent",
    "trust": "stated",
    "archived": False,
    "state": "valid",
    "metadata": {"category": "ops", "source": "the caller's own key"},
    "score": 0.5,
}


def test_the_rest_app_and_the_skill_show_a_memory_with_the_same_fields_and_metadata():
    rest, skill = mem0_view(MEMORY), mem0_client.mem0_result(MEMORY)
    skill_metadata = dict(skill["metadata"])
    assert skill_metadata.pop("degraded") is False
    assert rest["metadata"] == skill_metadata == mem0_metadata(MEMORY)
    shared = {key for key in rest if key in skill}
    assert {"id", "memory", "hash", "agent_id", "user_id", "created_at", "score"} <= shared
    assert all(rest[key] == skill[key] for key in shared - {"metadata"})


def test_memstratas_keys_win_over_the_callers_and_unset_ones_stay_out():
    metadata = mem0_metadata(MEMORY)
    assert metadata["category"] == "ops"
    assert metadata["source"] == "agent", "the memory's own source, not a caller's key of that name"
    assert metadata["archived"] is False, "False is set, only None is left out"
    assert "invalid_at" not in metadata and set(metadata) - {"category"} <= set(MEMSTRATA_METADATA)


def test_mem0s_procedural_memory_is_memstratas_procedure():
    assert memory_type_of("procedural_memory") == "procedure"
    assert memory_type_of("decision") == "decision" and memory_type_of(None) is None
