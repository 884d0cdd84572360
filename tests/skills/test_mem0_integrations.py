"""Other people's mem0 code against the real daemon: CrewAI's Mem0Storage and mem0's LangGraph example.

Neither framework is installed here (crewai pulls a vector database and an LLM client in; the
LangGraph example needs an OpenAI key): what is run is the sequence of mem0 calls each makes,
copied from their sources (crewAI ``src/crewai/memory/storage/mem0_storage.py``, mem0's
``docs/integrations/langgraph.mdx``; docs/mem0.md lists them), with the LLM's reply a fixed string.
Each call either works as in mem0 or fails with a message naming memstrata's difference.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.daemon.conversation.test_conversation import cluster  # noqa: F401  (agents a, b, c; a and c share infra)
from tests.skills.test_mem0_client import load_module
from tests.skills.test_mem0_compat import workspace


def memory_of(cluster, agent: str, async_: bool = False):  # noqa: F811
    mem0_client = load_module()
    kind = mem0_client.AsyncMemory if async_ else mem0_client.Memory
    options = {"workspace": str(workspace(cluster.root, agent)), "socket": str(cluster.daemon.socket)}
    return mem0_client, kind.from_config({"memstrata": options})


def test_crewai_mem0_storage_call_sequence(cluster):  # noqa: F811
    """Mem0Storage.save/search for each of its memory types, as it calls mem0 (``self.memory`` is a mem0 memory)."""
    _, memory = memory_of(cluster, "a")
    user_id, agent_name = "john", "Researcher_Writer"  # crewAI: the crew's agents' roles, sanitized and joined

    # type "user": save(value, metadata) -> add(value, user_id=…, metadata={**metadata})
    memory.add("John prefers short answers with sources", user_id=user_id, metadata={"task": "research", "quality": 8})
    # search(query, limit=3, score_threshold=0.35) -> search(query=…, limit=3, user_id=…), then score >= 0.35
    results = memory.search(query="how does John like his answers", limit=3, user_id=user_id)
    kept = [r for r in results["results"] if r["score"] >= 0.35]
    assert [r["memory"] for r in kept] == ["John prefers short answers with sources"]
    assert kept[0]["metadata"]["task"] == "research" and kept[0]["user_id"] == user_id

    # types short_term / long_term / entities: agent_id is the crew's role names, which is no memstrata agent:
    # refused with the reason (identity comes from the token), not stored under a made-up agent
    for call in (
        lambda: memory.add("draft outline ready", agent_id=agent_name, metadata={"type": "short_term"}),
        lambda: memory.add("lesson: cite primary sources", agent_id=agent_name, infer=False, metadata={"type": "lt"}),
        lambda: memory.search(query="outline", limit=3, agent_id=agent_name),
    ):
        with pytest.raises(ValueError, match="names another agent"):
            call()
    # its search also passes metadata= (a mem0 0.x argument): refused by name, never ignored
    with pytest.raises(ValueError, match=r"unsupported argument.*metadata"):
        memory.search(query="outline", limit=3, metadata={"type": "short_term"})
    # entities: add(value, user_id=<the role names>) is data, and works
    memory.add("Acme Corp is the client", user_id=agent_name, metadata={"type": "entity"})
    assert memory.get_all(filters={"type": "entity"})["results"][0]["user_id"] == agent_name


def test_langgraph_example_call_sequence(cluster):  # noqa: F811
    """mem0's LangGraph customer-support example: search the last message, build the context, add the turn."""
    _, mem0 = memory_of(cluster, "a")
    user_id = "alice"

    def chatbot(content: str, reply: str) -> str:
        memories = mem0.search(content, user_id=user_id, output_format="v1.1")  # the example's call, as written
        context = "Relevant information from previous conversations:\n"
        for memory in memories["results"]:
            context += f"- {memory['memory']}\n"
        interaction = [{"role": "user", "content": content}, {"role": "assistant", "content": reply}]
        result = mem0.add(interaction, user_id=user_id, output_format="v1.1")
        assert len(result.get("results", [])) == 2
        return context

    chatbot("My order #1234 arrived damaged, the screen is cracked", "I'm sorry! I've opened a replacement request.")
    context = chatbot("Any news about my replacement?", "Your replacement ships tomorrow.")
    assert "- My order #1234 arrived damaged, the screen is cracked" in context
    with pytest.raises(ValueError, match=r"output_format='v1\.0'"):
        mem0.search("x", user_id=user_id, output_format="v1.0")
    # another agent (b, in no shared project) sees none of alice's memories written by a
    _, other = memory_of(cluster, "b")
    assert other.search("order replacement", user_id=user_id)["results"] == []


def test_async_memory_awaits_the_same_calls(cluster):  # noqa: F811
    _, memory = memory_of(cluster, "a", async_=True)

    async def run():
        added = await memory.add("Alice's timezone is UTC+8", user_id="alice")
        found = await memory.search("what timezone is alice in", filters={"user_id": "alice"})
        history = await memory.history(added["results"][0]["id"])
        return added, found, history

    added, found, history = asyncio.run(run())
    assert found["results"][0]["id"] == added["results"][0]["id"] and [e["event"] for e in history] == ["ADD"]
