"""Cleanup, backup and restore through the real daemon and the real command lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from daemon.front.daemon_client import DaemonClient
from tests.daemon.conversation.test_conversation_outage import free_port, set_backend
from tests.helpers import FAST, REPO_ROOT, init_root, run_cli, token_of, wait_reachable

SKILL = REPO_ROOT / "skills" / "mem0-integration"


def old_session(daemon, agent: str, text: str) -> str:
    """A session memory written 10 days ago (back-dated straight in the store, as an old write would be)."""
    with DaemonClient(daemon.socket, timeout=60, token=token_of(daemon.config.parent, agent)) as client:
        added = client.add(agent, text, type="session")
    return added["results"][0]["id"]


def back_date(root, memory_ids: list[str], days: int) -> None:
    """Move memories' created_at and expiration_date into the past, with the daemon stopped."""
    from tests.edge_store import open_shard

    created = (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()
    expired = (datetime.now(timezone.utc) - timedelta(days=days - 7)).date().isoformat()
    with open_shard(root) as shard:
        for memory_id in memory_ids:
            shard.set_payload(memory_id, {"created_at": created, "expiration_date": expired})


@pytest.fixture
def running(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", config=config)
    daemon = daemons(config)
    wait_reachable(daemon)
    return daemon


def test_cleanup_needs_exactly_one_mode(tmp_path):
    config = init_root(tmp_path)
    for args in ((), ("--dry-run", "--execute")):
        proc = run_cli("cleanup", *args, config=config, check=False)
        assert proc.returncode == 2 and "exactly one of --dry-run" in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(SKILL / "memory_cleanup.py"), "--config", str(config)], capture_output=True, text=True
    )
    assert proc.returncode == 2


def test_cleanup_while_the_daemon_runs_and_from_the_skill_script(running, tmp_path, daemons):
    config = running.config
    keep = running_add(running, "今天的会话", "session")
    doomed = [old_session(running, "a", f"十天前的会话 {i}") for i in range(3)]
    running.stop()
    back_date(tmp_path, doomed, days=10)
    daemon = daemons(config)
    wait_reachable(daemon)

    dry = json.loads(run_cli("cleanup", "--dry-run", "--json", config=config).stdout)
    assert (dry["mode"], dry["expired"], dry["deleted"], dry["errors"]) == ("dry-run", 3, 0, [])
    assert dry["by_type"]["session"] == {"scanned": 4, "expired": 3, "deleted": 0, "archived": 0}
    # the seed's way: from the skill directory, with --config
    proc = subprocess.run(
        [sys.executable, "memory_cleanup.py", "--execute", "--json", "--config", str(config)],
        cwd=SKILL,
        capture_output=True,
        text=True,
        env={**os.environ, "MEMSTRATA_CONFIG": ""},
    )
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    assert (done["mode"], done["deleted"]) == ("execute", 3)
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        assert [m["id"] for m in a.get_all("a")["results"]] == [keep]
    again = json.loads(run_cli("cleanup", "--execute", "--json", config=config).stdout)
    assert again["deleted"] == 0

    logs = list((tmp_path / "workspace" / "logs" / "security").glob("memory-cleanup-*.log"))
    assert [p.name for p in logs] == [f"memory-cleanup-{datetime.now(timezone.utc):%Y-%m-%d}.log"]
    events = [json.loads(line)["event"] for line in logs[0].read_text().splitlines()]
    assert events.count("would_delete") == 3 and events.count("deleted") == 3 and events.count("summary") == 3
    assert "十天前" not in logs[0].read_text()
    human = run_cli("cleanup", "--dry-run", config=config).stdout
    assert "dry-run: scanned 1, expired 0" in human


def running_add(daemon, text: str, memory_type: str) -> str:
    with DaemonClient(daemon.socket, timeout=60, token=token_of(daemon.config.parent, "a")) as a:
        return a.add("a", text, type=memory_type)["results"][0]["id"]


def test_cleanup_with_the_daemon_down_opens_the_store_itself(running, tmp_path):
    doomed = old_session(running, "a", "过期的会话")
    running.stop()
    back_date(tmp_path, [doomed], days=10)
    result = json.loads(run_cli("cleanup", "--execute", "--json", config=running.config).stdout)
    assert result["deleted"] == 1


def test_unreachable_store_exits_1_and_deletes_nothing(tmp_path):
    config = init_root(tmp_path)
    set_backend(config, "remote", f"http://127.0.0.1:{free_port()}")
    proc = run_cli("cleanup", "--execute", config=config, check=False)
    assert proc.returncode == 1 and "unreachable" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "workspace" / "logs" / "security").glob("memory-cleanup-*.log"))


def test_backup_then_restore_brings_back_deleted_memories(running, tmp_path):
    config = running.config
    kept = [running_add(running, f"要备份的记忆 {i}", "knowledge") for i in range(3)]
    first = json.loads(run_cli("backup", "--json", config=config).stdout)
    assert first["backup"].startswith(str(tmp_path / "state" / "backups")) and first["bytes"] > 0
    with DaemonClient(running.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        for memory_id in kept:
            a.delete("a", memory_id)
        assert a.get_all("a")["results"] == []
    restored = json.loads(run_cli("restore-backup", first["backup"], "--json", config=config).stdout)
    assert "edge.before-restore-" in restored["previous_store_kept_at"]  # the shards as they were
    with DaemonClient(running.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        assert sorted(m["id"] for m in a.get_all("a")["results"]) == sorted(kept)
        assert a.add("a", "恢复后还能写")["queued"] is False
    for _ in range(3):
        last = json.loads(run_cli("backup", "--keep", "2", "--json", config=config).stdout)
    assert len(last["kept"]) == 2 and last["kept"][0] == last["backup"]
    bad = tmp_path / "not-a-backup.tar.gz"
    bad.write_bytes(uuid.uuid4().bytes)
    proc = run_cli("restore-backup", str(bad), config=config, check=False)
    assert proc.returncode == 1 and "not a readable backup" in proc.stderr
    # a restore that failed put nothing back: the store it closed serves again, and status says so
    status = json.loads(run_cli("status", "--json", config=config).stdout)["conversation"]
    assert status["reachable"] is True and not status["error"], status
    with DaemonClient(running.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        assert a.add("a", "失败的恢复之后还能写")["queued"] is False
        assert len(a.get_all("a")["results"]) == len(kept) + 2


def test_restores_keep_the_two_newest_replaced_stores(running, tmp_path):
    config = running.config
    running_add(running, "备份前的记忆", "knowledge")
    archive = json.loads(run_cli("backup", "--json", config=config).stdout)["backup"]
    answers = [json.loads(run_cli("restore-backup", archive, "--json", config=config).stdout) for _ in range(4)]
    data_dir = Path(answers[0]["previous_store_kept_at"]).parent
    left = sorted(p.name for p in data_dir.glob("edge.before-restore-*"))
    assert left == sorted(Path(a["previous_store_kept_at"]).name for a in answers[-2:])
    assert [Path(p).name for a in answers for p in a["removed_previous_stores"]] == [
        Path(a["previous_store_kept_at"]).name for a in answers[:2]
    ]
    text = run_cli("restore-backup", archive, config=config).stdout
    assert "removed  " in text and "an older restore's previous store" in text
