"""L4 update, history, get and delete_all through the real daemon, with tokens deciding who asks.

Every new path is tried by another agent against a private memory: it must
answer as if the memory did not exist (404), never with its text or its history.
"""

from __future__ import annotations

import time

import pytest

from daemon.front.daemon_client import DaemonRequestError
from tests.daemon.conversation.test_conversation import cluster  # noqa: F401  (the fixture: agents a, b, c and a daemon)


def status_of(call) -> int:
    with pytest.raises(DaemonRequestError) as refused:
        call()
    return refused.value.status


def test_owner_updates_keeping_identity_and_history_follows(cluster):  # noqa: F811
    with cluster.client("a") as a, cluster.client("c") as c:
        added = a.add("a", "部署了 Qdrant，端口 6333", visibility="project", project="infra", type="fact")
        memory_id = added["results"][0]["id"]
        before = a.get("a", memory_id)
        time.sleep(1.1)  # created_at has second resolution: an update must not move it
        updated = a.update("a", memory_id, "Qdrant 的端口改成了 6334")
        assert updated["event"] == "UPDATE" and updated["memory"] == "Qdrant 的端口改成了 6334"
        after = a.get("a", memory_id)
        assert after["created_at"] == before["created_at"]
        assert after["updated_at"] and after["updated_at"] != before["updated_at"]
        assert (after["agent_id"], after["visibility"], after["project_id"], after["memory_type"]) == (
            "a",
            "project",
            "infra",
            "fact",
        )
        found = a.memory_search("a", "Qdrant 端口 6334")["results"]
        assert found[0]["id"] == memory_id and found[0]["memory"] == "Qdrant 的端口改成了 6334"  # re-embedded
        # c (same project) reads it and its history, but may not change it
        assert [e["event"] for e in c.history("c", memory_id)["results"]] == ["ADD", "UPDATE"]
        assert status_of(lambda: c.update("c", memory_id, "c 改的")) == 403
        assert c.delete_all("c", project="infra")["ids"] == []  # only c's own would go
        assert a.get("a", memory_id)["memory"] == "Qdrant 的端口改成了 6334"
        a.delete("a", memory_id)
        events = a.history("a", memory_id)["results"]
        assert [e["event"] for e in events] == ["ADD", "UPDATE", "DELETE"]
        assert events[1]["old_memory"] == "部署了 Qdrant，端口 6333"
    audit = cluster.audit()
    assert any(e["event"] == "memory_updated" and e["memory_id"] == memory_id for e in audit)
    assert any(e["event"] == "update_denied" and e["agent"] == "c" for e in audit)
    assert any(e["event"] == "memory_deleted" and e["memory_id"] == memory_id for e in audit)


def test_private_memory_unreachable_by_another_agent_on_every_new_path(cluster):  # noqa: F811
    with cluster.client("a") as a, cluster.client("b") as b:
        memory_id = a.add("a", "a 的私密记忆：备份密钥在 3 号柜子", visibility="private")["results"][0]["id"]
        b_own = b.add("b", "b 自己的记忆", visibility="private")["results"][0]["id"]
        assert status_of(lambda: b.get("b", memory_id)) == 404
        assert status_of(lambda: b.history("b", memory_id)) == 404
        assert status_of(lambda: b.update("b", memory_id, "b 改的")) == 404
        assert status_of(lambda: b.delete("b", memory_id)) == 404
        assert status_of(lambda: b.update("a", memory_id, "冒充 a")) == 403  # b's token naming a
        assert status_of(lambda: b.delete_all("a")) == 403
        assert b.delete_all("b")["ids"] == [b_own]  # b's delete_all reaches b's own memories only
        assert a.get("a", memory_id)["memory"] == "a 的私密记忆：备份密钥在 3 号柜子"
        a.delete("a", memory_id)
        assert status_of(lambda: b.history("b", memory_id)) == 404  # nor once it is deleted
        assert [e["event"] for e in a.history("a", memory_id)["results"]] == ["ADD", "DELETE"]
    assert not any("备份密钥" in str(e) for e in cluster.audit())  # the text never reaches the audit log


def test_delete_all_filters_and_dry_run(cluster):  # noqa: F811
    with cluster.client("a") as a:
        session = a.add("a", "今天的会话记录", type="session", visibility="private")["results"][0]["id"]
        lesson = a.add("a", "教训：先备份再迁移", type="lesson", visibility="private")["results"][0]["id"]
        dry = a.delete_all("a", type="session", dry_run=True)
        assert (dry["ids"], dry["dry_run"], dry["deleted"], dry["would_delete"]) == ([session], True, 0, 1)
        assert a.get("a", session)["memory"] == "今天的会话记录"
        assert a.delete_all("a", type="session")["ids"] == [session]
        assert status_of(lambda: a.get("a", session)) == 404
        assert a.get("a", lesson)["memory"] == "教训：先备份再迁移"
        assert status_of(lambda: a._request("DELETE", "/v1/memories", params={"agent": "a", "user": "x"})) == 400


def test_expires_in_the_past_and_bad_updates_are_refused(cluster):  # noqa: F811
    with cluster.client("a") as a:
        with pytest.raises(DaemonRequestError) as past:
            a.add("a", "过期的记忆", expires="2020-01-01")
        assert past.value.status == 400 and "in the past" in str(past.value)
        memory_id = a.add("a", "一条记忆", visibility="private")["results"][0]["id"]
        assert status_of(lambda: a.update("a", memory_id, "新的", expires="2020-01-01")) == 400
        assert status_of(lambda: a.update("a", memory_id, "   ")) == 400
        assert status_of(lambda: a.update("a", "not-an-id", "新的")) == 404
        bad = {"agent": "a", "text": "x", "agent_id": "b"}
        assert status_of(lambda: a._request("PUT", f"/v1/memories/{memory_id}", json=bad)) == 400
        assert a.get("a", memory_id)["memory"] == "一条记忆"
        moved = a.update("a", memory_id, "一条记忆（到年底）", expires="2099-12-31")
        assert moved["expiration_date"] == "2099-12-31"


def test_changes_while_the_store_is_down_are_refused_never_queued(tmp_path, daemons):
    """Update, delete and delete_all need the memory's owner and current text, which only the store
    holds: while it is down they are refused (503, saying nothing was queued) and the queue stays empty."""
    from daemon.front.daemon_client import DaemonClient
    from tests.daemon.conversation.test_conversation_outage import free_port, prepare
    from tests.helpers import token_of

    config = prepare(tmp_path, f"http://127.0.0.1:{free_port()}")
    daemon = daemons(config)
    some_id = "0b6f1a52-7a45-4e63-9a0c-2d4c0e6d1f11"
    with DaemonClient(daemon.socket, timeout=30, token=token_of(tmp_path, "a")) as a:
        for call in (
            lambda: a.update("a", some_id, "新的"),
            lambda: a.delete("a", some_id),
            lambda: a.delete_all("a", type="session"),
            lambda: a.history("a", some_id),
            lambda: a.get("a", some_id),
        ):
            with pytest.raises(DaemonRequestError) as down:
                call()
            assert down.value.status == 503 and "unreachable" in str(down.value)
        with pytest.raises(DaemonRequestError) as down:
            a.update("a", some_id, "新的")
        assert "nothing was queued" in str(down.value)
    assert daemon.status()["conversation"]["queue"]["depth"] == 0


def test_cli_get_list_update_delete_history_with_json(cluster):  # noqa: F811
    import json

    from tests.helpers import run_cli

    config = cluster.root / "memstrata.yaml"

    def cli(*args: str, check: bool = True):
        return run_cli(*args, "--agent", "a", config=config, check=check)

    def as_json(*args: str):
        return json.loads(cli(*args, "--json").stdout)

    added = as_json("add", "CLI 写入的记忆", "--type", "lesson", "--visibility", "private")
    memory_id = added["results"][0]["id"]
    assert as_json("get", memory_id)["memory"] == "CLI 写入的记忆"
    listed = as_json("list", "--type", "lesson")
    assert [r["id"] for r in listed["results"]] == [memory_id]
    assert as_json("list", "--type", "session")["results"] == []
    assert as_json("update", memory_id, "CLI 改过的记忆")["memory"] == "CLI 改过的记忆"
    past = cli("update", memory_id, "x", "--expires", "2020-01-01", check=False)
    assert past.returncode == 2 and "in the past" in past.stderr  # the daemon's 400: a usage error
    assert [e["event"] for e in as_json("history", "--memory", memory_id)["results"]] == ["ADD", "UPDATE"]
    assert "UPDATE  CLI 改过的记忆" in cli("history", "--memory", memory_id).stdout
    preview = as_json("delete", "--all", "--type", "lesson", "--dry-run")
    assert (preview["ids"], preview["would_delete"], preview["deleted"]) == ([memory_id], 1, 0), "a preview deletes 0"
    assert as_json("delete", memory_id) == {"deleted": memory_id}
    missing = cli("get", memory_id, check=False)
    assert missing.returncode == 1 and "no memory" in missing.stderr
    neither = cli("delete", check=False)
    assert neither.returncode == 2 and "--all" in neither.stderr
    assert as_json("delete", "--all")["deleted"] == 0


def test_dedup_on_write_noop_and_scope(cluster):  # noqa: F811
    """By default an exact duplicate (whitespace and case aside) is a NOOP; nothing near is merged."""
    text = "部署了 Qdrant，端口 6333"
    with cluster.client("a") as a, cluster.client("c") as c:
        first = a.add("a", text, visibility="private", type="fact")["results"]
        assert [r["event"] for r in first] == ["ADD"]
        memory_id = first[0]["id"]
        for again in (text, "  部署了 qdrant，端口   6333 "):
            result = a.add("a", again, visibility="private", type="fact")["results"]
            assert [(r["event"], r["id"]) for r in result] == [("NOOP", memory_id)], again
        # e5 scores this 0.995, as it does distinct facts ("周三" / "周四"): without a threshold, kept apart
        assert a.add("a", text + "。", visibility="private", type="fact")["results"][0]["event"] == "ADD"
        # another scope is never merged: another type, another visibility, another agent
        assert a.add("a", text, visibility="private", type="session")["results"][0]["event"] == "ADD"
        assert a.add("a", text, project="infra", type="fact")["results"][0]["event"] == "ADD"
        assert c.add("c", text, visibility="private", type="fact")["results"][0]["event"] == "ADD"
        assert [e["event"] for e in a.history("a", memory_id)["results"]] == ["ADD"]
        assert len(a.get_all("a")["results"]) == 4  # c's private one is not a's to see


def _daemon_with(tmp_path, daemons, dedup: dict):
    from daemon.front.daemon_client import DaemonClient
    from tests.helpers import FAST, init_root, run_cli, token_of, wait_reachable

    config = init_root(tmp_path, **FAST, conversation={"dedup": dedup})
    run_cli("agent", "add", "a", config=config)
    daemon = daemons(config)
    wait_reachable(daemon)
    return DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a"))


def test_dedup_near_threshold_updates_the_existing_memory(tmp_path, daemons):
    with _daemon_with(tmp_path, daemons, {"near_threshold": 0.95}) as a:
        memory_id = a.add("a", "部署了 Qdrant，端口 6333", visibility="private")["results"][0]["id"]
        near = a.add("a", "部署了 Qdrant，端口 6333。", visibility="private")["results"]
        assert [(r["event"], r["id"]) for r in near] == [("UPDATE", memory_id)]
        assert near[0]["score"] >= 0.95 and near[0]["previous_memory"] == "部署了 Qdrant，端口 6333"
        assert [e["event"] for e in a.history("a", memory_id)["results"]] == ["ADD", "UPDATE"]
        unrelated = a.add("a", "The CI pipeline fails when the cache is cold", visibility="private")
        assert unrelated["results"][0]["event"] == "ADD"
        assert len(a.get_all("a")["results"]) == 2


def test_dedup_off_stores_every_write(tmp_path, daemons):
    with _daemon_with(tmp_path, daemons, {"enabled": False}) as a:
        ids = {a.add("a", "同一句话", visibility="private")["results"][0]["id"] for _ in range(2)}
        assert len(ids) == 2 and len(a.get_all("a")["results"]) == 2
