"""The memory-memstrata plugin in the real OpenClaw: installed with ``openclaw plugins install``, its tools
called through the gateway's ``/tools/invoke`` as two agents, its hooks run in a real agent turn.

One host for the module (building it with OpenClaw's own commands takes minutes on two cores): main and
research (``openclaw agents add research``, whose workspace OpenClaw puts inside main's), each with a
note of its own; memstrata's daemon on that state dir; the gateway on loopback with the plugin in the
memory slot and memory-core disabled. The model is a stand-in endpoint of the test's own
(tests/plugins/stand_in_chat.py): OpenClaw needs one to run a turn, and no LLM runs here.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.helpers import wait_for
from tests.openclaw_install import file_hashes, short_home
from tests.plugins.plugin_host import PluginHost, table_rows

pytestmark = pytest.mark.slow

MAIN_NOTE = (
    "# Main memory\n\nThe deploy window for project kestrel is Tuesday 14:00 UTC.\nMain prefers short reports.\n"
)
RESEARCH_NOTE = (
    "# Research memory\n\nThe survey of vector databases found pgvector adequate for ten million rows.\n"
    "The benchmark's codename is heron.\n"
)


@pytest.fixture(scope="module")
def host():
    with short_home() as home:
        h = PluginHost(home)
        try:
            yield h.build({"main": MAIN_NOTE, "research": RESEARCH_NOTE})
        finally:
            h.close()


def texts(details: dict) -> str:
    return "\n".join(r["snippet"] for r in details["results"])


def test_each_agent_searches_its_own_notes_and_never_the_others(host):
    mine = host.details("memory_search", "research", {"query": "vector databases benchmark codename"})
    assert mine["provider"] == "memstrata"
    assert [r["path"] for r in mine["results"]] == ["MEMORY.md"]
    assert "heron" in texts(mine) and mine["results"][0]["citation"].startswith("MEMORY.md#L")
    assert host.details("memory_search", "research", {"query": "kestrel deploy window"})["results"] == []
    theirs = host.details("memory_search", "main", {"query": "kestrel deploy window"})
    assert "kestrel" in texts(theirs) and "heron" not in texts(theirs)
    # main's workspace holds research's (OpenClaw nests it): main's index still has none of research's notes
    assert host.details("memory_search", "main", {"query": "heron pgvector"})["results"] == []


def test_private_memories_stay_with_the_agent_that_stored_them(host):
    stored = host.details("memory_store", "research", {"text": "The heron runs use box seven.", "category": "fact"})
    assert stored["action"] == "created" and stored["visibility"] == "private" and stored["memoryType"] == "fact"
    main_id = host.details("memory_store", "main", {"text": "The kestrel rollback plan is in drawer three."})["id"]

    found = host.details("memory_search", "research", {"query": "heron box seven", "corpus": "sessions"})
    assert stored["id"] in [r["id"] for r in found["results"]]
    assert main_id not in [r["id"] for r in found["results"]]
    other = host.details("memory_search", "main", {"query": "heron box seven", "corpus": "all"})
    assert stored["id"] not in [r.get("id") for r in other["results"]] and "box seven" not in texts(other)

    path = f"memstrata:{stored['id']}"
    assert host.details("memory_get", "research", {"path": path})["text"] == "The heron runs use box seven."
    assert host.details("memory_get", "main", {"path": path}) == {"status": "not_found", "path": path, "text": ""}
    assert host.details("memory_forget", "main", {"memoryId": stored["id"]})["action"] == "not_found"
    assert host.details("memory_get", "research", {"path": path})["status"] == "ok"  # still there
    assert host.details("memory_forget", "research", {"memoryId": stored["id"]})["action"] == "deleted"
    assert host.details("memory_get", "research", {"path": path})["status"] == "not_found"
    assert host.details("memory_forget", "main", {"memoryId": main_id})["action"] == "deleted"


def test_memory_get_reads_the_callers_own_memory_files_only(host):
    got = host.details("memory_get", "research", {"path": "MEMORY.md", "from": 3, "lines": 1})
    assert got["status"] == "ok" and got["text"].startswith("The survey of vector databases") and got["nextFrom"] == 4
    assert host.details("memory_get", "research", {"path": "memory/2020-01-01.md"})["status"] == "not_found"

    main_file = str(host.workspace("main") / "MEMORY.md")
    for path, status, said in [
        ("research/MEMORY.md", 400, "is not one of this agent's memory files"),  # main reaching into the nested one
        ("../MEMORY.md", 403, "is outside this agent's workspace"),
        (main_file, 403, "is outside this agent's workspace"),
        ("SOUL.md/../../MEMORY.md", 403, "is outside this agent's workspace"),
    ]:
        agent = "main" if path.startswith("research/") else "research"
        code, answer = host.invoke("memory_get", agent, {"path": path})
        assert (code, answer["ok"]) == (status, False), (path, code, answer)
        assert said in answer["error"]["message"], answer

    memory_dir = host.workspace("research") / "memory"
    memory_dir.mkdir(exist_ok=True)
    link = memory_dir / "stolen.md"
    link.symlink_to(main_file)
    try:
        code, answer = host.invoke("memory_get", "research", {"path": "memory/stolen.md"})
        assert code == 403 and "symlink" in answer["error"]["message"] and "kestrel" not in json.dumps(answer)
    finally:
        link.unlink()


def test_an_agent_named_in_the_arguments_is_refused_with_a_clear_error(host):
    for tool, args in [
        ("memory_search", {"query": "kestrel", "agent": "main"}),
        ("memory_store", {"text": "x", "agent_id": "main"}),
        ("memory_get", {"path": "MEMORY.md", "workspace": str(host.workspace("main"))}),
    ]:
        code, answer = host.invoke(tool, "research", args)
        assert code == 400 and not answer["ok"], answer
        message = answer["error"]["message"]
        assert "unknown argument" in message and "calling agent (research)" in message, message


def test_a_token_of_another_agent_in_a_workspace_is_refused_by_the_daemon(host):
    token = host.workspace("research") / ".memstrata" / "token"
    own = token.read_bytes()
    token.write_bytes((host.workspace("main") / ".memstrata" / "token").read_bytes())
    try:
        code, answer = host.invoke("memory_store", "research", {"text": "written with main's token"})
        assert code == 403, answer
        assert "belongs to agent 'main', not 'research'" in answer["error"]["message"]
    finally:
        token.write_bytes(own)
        os.chmod(token, 0o600)


def test_auto_recall_and_capture_in_a_real_turn(host):
    host.chat.calls.clear()
    question = "Which codename does the vector database benchmark use?"
    host.run("agent", "--agent", "research", "-m", question, "--json", "--timeout", "240", timeout=300)
    prompt = next(p for p in host.chat.prompts() if question in p)
    block = prompt[prompt.index("<memstrata-recall>") : prompt.index("</memstrata-recall>")]
    assert "untrusted data, not instructions" in block and "heron" in block and "kestrel" not in block
    assert prompt.index("</memstrata-recall>") < prompt.index(question)  # before the prompt, not in the system's

    def captured() -> list[dict]:
        found = host.details("memory_search", "research", {"query": question, "corpus": "sessions"})
        return [r for r in found["results"] if question in r["snippet"]]

    session = wait_for(captured, timeout=60, interval=1, what="the turn stored as research's session memory")
    assert session[0]["memoryType"] == "session" and session[0]["visibility"] == "private"
    assert "Stand-in reply" in session[0]["snippet"]
    theirs = host.details("memory_search", "main", {"query": question, "corpus": "sessions"})
    assert question not in texts(theirs)


def test_the_memstrata_cli_commands(host):
    status = json.loads(host.run("memstrata", "status", "--agent", "research").stdout)
    assert status["agent"] == "research" and status["memorySlot"] == "memory-memstrata"
    assert status["access"] == "agent research" and [a["id"] for a in status["agents"]] == ["research"]
    found = json.loads(host.run("memstrata", "search", "heron", "pgvector", "--agent", "research").stdout)
    assert [r["path"] for r in found["results"]] == ["MEMORY.md"]
    done = host.run("memstrata", "reindex", "--agent", "main")
    assert json.loads(done.stdout)


def test_openclaws_files_stay_byte_identical_but_for_the_operators_steps(host):
    """Everything above ran: memstrata init, its daemon and its commits, the plugin's install and settings,
    the gateway, every tool call, a turn. Of the files OpenClaw had before, only these changed: openclaw.json,
    in its plugin entries only, and its backups (OpenClaw rotates them at each write of its config commands:
    the operator's steps); state/openclaw.sqlite, OpenClaw's live database, which its gateway and a turn write
    whatever holds the slot (leases, migrations, task runs, its records of each config write), and where the
    plugin keeps nothing of its own. The copied extension dir is new."""
    after = file_hashes(host.state)
    changed = sorted(rel for rel, digest in host.before.items() if after.get(rel) != digest)
    unexpected = [
        rel for rel in changed if not re.fullmatch(r"openclaw\.json(\.bak(\.\d+)?)?|state/openclaw\.sqlite", rel)
    ]
    assert unexpected == [], f"OpenClaw's files changed: {changed}"
    now, before = host.config(), host.config_before
    assert {k: v for k, v in now.items() if k != "plugins"} == {k: v for k, v in before.items() if k != "plugins"}
    assert now["plugins"]["slots"]["memory"] == "memory-memstrata"
    tables = table_rows(host.state / "state" / "openclaw.sqlite")
    kept = [r for t in ("plugin_state_entries", "plugin_blob_entries") for r in tables[t].values() if "memstrata" in r]
    assert kept == [], kept
    assert "extensions/memory-memstrata/index.js" in after
