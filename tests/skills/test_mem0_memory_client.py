"""The real ``mem0ai`` package's ``MemoryClient`` against the daemon's mem0 REST API (daemon/api/mem0_rest.py).

PLATFORM_QUICKSTART is mem0's documented platform quickstart (docs/mem0.md keeps the copy and where it
is from); it runs in a subprocess of the test's python, with mem0ai 2.2.1 as installed, with two
changes: ``host=`` points at the daemon's loopback port and the API key is agent a's workspace token
(the key *is* the token: memstrata has no other account).  Then the rest of the client's memory calls.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from tests.helpers import FAST, init_root, run_cli, token_of, wait_reachable

PLATFORM_QUICKSTART = """\
from mem0 import MemoryClient

client = MemoryClient(api_key="your-api-key")
messages = [
    {"role": "user", "content": "I'm a vegetarian and allergic to nuts."},
    {"role": "assistant", "content": "Got it! I'll remember your dietary preferences."}
]
client.add(messages, user_id="user123")
results = client.search("What are my dietary restrictions?", filters={"user_id": "user123"})
print(results)
"""

REST_OF_THE_CLIENT = """
import json
added = client.add("Alex works night shifts", user_id="alex", metadata={"category": "work"})
everything = client.get_all(filters={"user_id": "user123"})
memory_id = everything["results"][0]["id"]
one = client.get(memory_id)
client.update(memory_id, text="Vegetarian; allergic to nuts and peanuts")
updated = client.get(memory_id)
history = client.history(memory_id)
by_meta = client.search("work schedule", filters={"AND": [{"user_id": "alex"}, {"category": "work"}]})
unrelated = client.search("how tall is mount everest", filters={"user_id": "user123"})
client.delete(memory_id)
client.delete_all(user_id="alex")
left = client.get_all(filters={"user_id": "alex"})
try:
    client.search("x", filters={"agent_id": "b"})
    other_agent = "not refused"
except Exception as exc:
    other_agent = f"{type(exc).__name__}: {exc}"
print("REST " + json.dumps({
    "added": added, "everything": everything, "one": one, "updated": updated, "history": history,
    "by_meta": by_meta, "unrelated": unrelated, "left": left, "other_agent": other_agent,
}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mem0_daemon(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", config=config)
    run_cli("agent", "add", "b", config=config)
    port = free_port()
    data = yaml.safe_load(config.read_text())
    data.setdefault("conversation", {})["mem0_api"] = {"enabled": True, "port": port}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    daemon = daemons(config)
    wait_reachable(daemon)
    return tmp_path, port


def test_mem0s_platform_quickstart_runs_against_the_daemon_with_only_host_changed(mem0_daemon):
    root, port = mem0_daemon
    token = token_of(root, "a")
    code = PLATFORM_QUICKSTART.replace(
        'MemoryClient(api_key="your-api-key")', f'MemoryClient(api_key="{token}", host="http://127.0.0.1:{port}")'
    )
    changed = [(x, y) for x, y in zip(PLATFORM_QUICKSTART.splitlines(), code.splitlines(), strict=True) if x != y]
    assert len(changed) == 1 and changed[0][0] == 'client = MemoryClient(api_key="your-api-key")'
    env = {**os.environ, "MEM0_TELEMETRY": "False", "MEM0_DIR": str(root / "mem0-home"), "HOME": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", code + REST_OF_THE_CLIENT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    quickstart_line, rest_line = done.stdout.strip().splitlines()[-2:]
    found = eval(quickstart_line)["results"]
    memories = [r["memory"] for r in found]
    assert "I'm a vegetarian and allergic to nuts." in memories
    top = next(r for r in found if r["memory"] == "I'm a vegetarian and allergic to nuts.")
    assert top["user_id"] == "user123" and top["agent_id"] == "a" and 0.1 <= top["score"] <= 1
    assert top["metadata"]["visibility"] == "private" and top["role"] == "user"

    rest = json.loads(rest_line.removeprefix("REST "))
    assert rest["added"]["results"][0]["event"] == "ADD"
    assert {r["memory"] for r in rest["everything"]["results"]} == set(memories) | {
        "Got it! I'll remember your dietary preferences."
    } and rest["everything"]["count"] == 2
    assert rest["one"]["id"] == rest["everything"]["results"][0]["id"]
    assert rest["updated"]["memory"] == "Vegetarian; allergic to nuts and peanuts"
    assert [e["event"] for e in rest["history"]] == ["ADD", "UPDATE"]
    assert [r["memory"] for r in rest["by_meta"]["results"]] == ["Alex works night shifts"]
    assert rest["by_meta"]["results"][0]["metadata"]["category"] == "work"
    assert rest["unrelated"]["results"] == [], "mem0's default threshold drops what is unrelated"
    assert rest["left"]["results"] == [] and rest["left"]["count"] == 0
    assert "names another agent" in rest["other_agent"]


def test_the_mem0_api_wants_an_agents_token(mem0_daemon):
    root, port = mem0_daemon
    env = {**os.environ, "MEM0_TELEMETRY": "False", "MEM0_DIR": str(root / "mem0-home"), "HOME": str(root)}
    code = f"""
from mem0 import MemoryClient
for key in ("not-a-token", open({str(root / "state" / "admin.token")!r}).read().strip()):
    try:
        MemoryClient(api_key=key, host="http://127.0.0.1:{port}")
        print("accepted")
    except Exception as exc:
        print("refused", exc)
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    wrong, admin = done.stdout.strip().splitlines()[-2:]
    assert wrong.startswith("refused") and "valid token" in wrong
    assert admin.startswith("refused") and "acts as one agent" in admin


def test_the_mem0_api_is_off_by_default_and_loopback_only():
    from daemon.common.config import ConversationConfig, Mem0ApiConfig

    assert ConversationConfig().mem0_api.enabled is False
    assert Mem0ApiConfig(host="::1").host == "::1"
    for host in ("0.0.0.0", "100.115.94.1", "example.org"):
        with pytest.raises(ValueError, match="not a loopback address"):
            Mem0ApiConfig(host=host)


def test_the_rest_api_pages_refuses_and_names_what_it_does_not_serve(mem0_daemon):
    """What the quickstart does not reach: get_all's pages, delete_all without an id, another agent_id, a 404."""
    import httpx

    root, port = mem0_daemon
    headers = {"Authorization": f"Token {token_of(root, 'a')}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=120) as http:
        for i in range(3):
            added = http.post("/v3/memories/add/", json={"messages": f"note {i} about carol", "user_id": "carol"})
            assert added.status_code == 200 and added.json()["results"][0]["event"] == "ADD", added.text
        first = http.post("/v3/memories/", params={"page": 1, "page_size": 2}, json={"filters": {"user_id": "carol"}})
        page = first.json()
        assert page["count"] == 3 and len(page["results"]) == 2 and page["previous"] is None
        assert "page=2" in page["next"]
        second = http.post("/v3/memories/", params={"page": 2, "page_size": 2}, json={"filters": {"user_id": "carol"}})
        assert len(second.json()["results"]) == 1 and second.json()["next"] is None
        refused = http.delete("/v1/memories/")
        assert refused.status_code == 400 and "needs user_id" in refused.json()["detail"]
        other = http.post("/v3/memories/add/", json={"messages": "x", "agent_id": "b"})
        assert other.status_code == 403 and "names another agent" in other.json()["detail"]
        bad = http.post("/v3/memories/search/", json={"query": "x", "threshold": 1.5})
        assert bad.status_code == 400 and "threshold" in bad.json()["detail"]
        # mem0's search has no query limit (memstrata's /v1 searches refuse one over 4,096 characters)
        long = http.post("/v3/memories/search/", json={"query": "notes about carol " * 300})
        assert long.status_code == 200 and long.json()["results"], long.text
        missing = http.get("/v1/entities/")
        assert missing.status_code == 404 and "mem0's memory API only" in missing.json()["detail"]
        # a memory id of "/" is no memory, with or without the trailing slash, and nothing is redirected
        # (Starlette sent /v1/memories// on to the delete-all route, with the caller's query)
        for path in ("/v1/memories/%2F", "/v1/memories/%2F/"):
            for method in ("GET", "DELETE"):
                answer = http.request(method, path, params={"user_id": "carol"})
                assert answer.status_code == 404 and "mem0's memory API only" in answer.json()["detail"], answer
        kept = http.post("/v3/memories/", json={"filters": {"user_id": "carol"}}).json()
        assert kept["count"] == 3
        one = kept["results"][0]["id"]
        assert http.get(f"/v1/memories/{one}").json()["id"] == one  # served without the slash too
        assert http.delete("/v1/memories/", params={"user_id": "carol"}).json()["deleted"] == 3
