"""The words and identifier shapes of the API: what a request may say, defined once.

The daemon's request validation, its policy (layers/conversation/policy/rules.py), the CLI, the MCP tools
and the skill all take their choices from here, so a new memory type or trust level is added in one
place.  Patterns are kept as text (``re`` patterns an edge compiles or hands to its validator).
"""

from __future__ import annotations

VISIBILITIES = ("public", "project", "private")

# The seed's four types plus the ones agents asked for (their lifetimes: layers/conversation/policy/rules.py).
MEMORY_TYPES = (
    "session",
    "chat_summary",
    "preference",
    "knowledge",
    "fact",
    "lesson",
    "decision",
    "procedure",
    "task_log",
)

# How far a memory's writer is trusted (the seed's three levels, lowest first), and where its text came from:
# the seed's four sources (an agent picks among them), and the operator's.
TRUST_LEVELS = ("low", "medium", "high")
SOURCES = ("user_direct", "agent_output", "tool_result", "inferred", "operator")

# The speaker of a turn an L4 add carries (mem0's message roles a memory keeps).
ROLES = ("user", "assistant")

# How an L3 search ranks: chosen by the index (auto), full text, vectors, or both fused.
SEARCH_MODES = ("auto", "fts", "vector", "hybrid")

# Agent and project ids end up in file-system paths (``agents/<id>-workspace``), so they are restricted to
# a character set that cannot express a path trick (no ``/``, no ``..``, no leading dot or dash).
AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
# A memory's id as the store makes them (a UUID); anything else names no memory.
MEMORY_ID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# A write's idempotency key: a retry with the same one is written once.
WRITE_ID_PATTERN = r"^[A-Za-z0-9._:-]+$"
# mem0's user_id / run_id / actor_id: data about whom a memory is, any text without whitespace or controls.
ENTITY_ID_PATTERN = r"^[^\s\x00-\x1f\x7f]{1,128}$"
# A calendar day (an expiry): YYYY-MM-DD.
DAY_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
# A consolidation run's id, as ``memstrata consolidate`` reports it (what an undo names).
RUN_ID_PATTERN = r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$"
