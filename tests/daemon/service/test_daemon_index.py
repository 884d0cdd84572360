"""L3 through the running daemon: edits become searchable, the memory gate, rebuilds, fallbacks."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import yaml

from tests.helpers import FAST, LEAN, REPO_ROOT, init_root, run_cli, wait_for


def _search(config, query, *extra, agent="main", check=True):
    proc = run_cli("search", query, "--agent", agent, "--json", *extra, config=config, check=check)
    return json.loads(proc.stdout) if proc.returncode == 0 else proc


def _paths(answer) -> set[str]:
    return {r["path"] for r in answer["results"]}


def _index(d, agent="main") -> dict:
    return d.agent(agent)["index"]


def test_an_edit_becomes_searchable_and_the_old_text_disappears(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    note = ws / "memory" / "2026-11-20.md"
    note.write_text("# 部署\n\nQdrant 部署在 6333 端口\n")
    wait_for(lambda: _paths(_search(config, "6333端口")) == {"memory/2026-11-20.md"}, what="new text searchable")
    note.write_text("# 部署\n\n迁移到 Tailscale 网络\n")
    wait_for(lambda: _paths(_search(config, "Tailscale")) == {"memory/2026-11-20.md"}, what="edited text searchable")
    assert _search(config, "6333", "--mode", "fts")["results"] == []
    note.unlink()
    wait_for(lambda: _search(config, "Tailscale", "--mode", "fts")["results"] == [], what="deleted file gone")
    assert _index(d)["state"] == "ready"


def test_shared_core_is_searchable_from_every_agent(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "ops", config=config)
    daemons(config)
    (tmp_path / "workspace" / "shared" / "RULES.md").write_text("# 集群规则\n\n所有代理使用 Tailscale\n")
    wait_for(lambda: _paths(_search(config, "集群规则", agent="ops")) == {"shared/RULES.md"}, what="shared core in ops")
    ops_ws = tmp_path / "workspace" / "agents" / "ops-workspace"
    (ops_ws / "memory" / "2026-11-21.md").write_text("ops private note about tailscale\n")
    wait_for(lambda: "memory/2026-11-21.md" in _paths(_search(config, "tailscale", agent="ops")))
    assert "memory/2026-11-21.md" not in _paths(_search(config, "tailscale")), "an agent's index is its own"


def test_closed_gate_answers_lexically_then_vectors_fill_when_it_opens(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"min_free_mb": 10**8, "idle_unload_s": 2, "unload": "idle"})
    ws = tmp_path / "workspace"
    d = daemons(config)
    for i in range(3):
        (ws / "memory" / f"2026-10-0{i + 1}.md").write_text(f"# day {i}\n\n讨论了向量检索和记忆 {i}\n")
    wait_for(lambda: len(_search(config, "向量检索")["results"]) == 3, what="lexical results")
    answer = _search(config, "向量检索")
    assert answer["vectors"].startswith("unavailable: memory gate closed")
    assert answer["lists"] == ["fts"]
    before = _index(d)["pending_embeddings"]
    assert before >= 3
    (ws / "memory" / "2026-10-09.md").write_text("one more 记忆\n")
    wait_for(lambda: _index(d)["pending_embeddings"] > before, what="pending set grows while the gate is closed")
    status = d.status()["vectors"]
    assert status["gate"]["open"] is False and status["loaded"] is False and "memory gate closed" in status["waiting"]
    human = run_cli("status", config=config).stdout
    assert "memory gate closed" in human and "waiting for vectors" in human
    assert "q4_0.gguf, split form)" in human  # what the daemon runs (layers/local/models/model_parts.py)

    data = yaml.safe_load(config.read_text())
    data["vectors"]["min_free_mb"] = 0
    config.write_text(yaml.safe_dump(data))
    d.signal(signal.SIGHUP)
    wait_for(lambda: _index(d)["pending_embeddings"] == 0, timeout=120, what="vectors filled after the gate opened")
    assert _index(d)["vectors"] == _index(d)["chunks"]
    assert "every chunk has its vector" in run_cli("reindex", "--vectors", config=config).stdout
    hybrid = _search(config, "向量检索", "--explain")
    # "vector:use": the companion model's ranking beside e5's (layers/local/models/companion.py)
    assert hybrid["vectors"] == "used" and set(hybrid["lists"]) == {"fts", "vector", "vector:use"}
    semantic = _search(config, "vector search and memory", "--mode", "vector")
    assert semantic["results"] and semantic["lists"] == ["vector", "vector:use"]
    wait_for(lambda: d.status()["vectors"]["loaded"] is False, timeout=30, what="model unloaded after idle")


def test_a_damaged_index_is_rebuilt_from_markdown(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    ws = tmp_path / "workspace"
    (ws / "memory" / "2026-11-01.md").write_text("rebuild me: 重建索引\n")
    first = daemons(config)
    index_path = tmp_path / "agents" / "main" / "memstrata" / "index.sqlite"
    wait_for(lambda: _paths(_search(config, "重建索引")) == {"memory/2026-11-01.md"})
    assert first.stop() == 0
    index_path.write_bytes(b"\x00not a database\x00" * 4096)
    d = daemons(config)
    wait_for(lambda: _paths(_search(config, "重建索引")) == {"memory/2026-11-01.md"}, what="search after rebuild")
    rebuild = _index(d)["last_rebuild"]
    assert rebuild and "damaged" in rebuild["reason"]
    assert "rebuilding the L3 index" in d.log()

    # damaged while running: the next use notices and rebuilds
    with open(index_path, "r+b") as fh:
        fh.write(b"\xff" * 4096)

    def found_once_rebuilt() -> bool:
        """A search during the rebuild is answered 503 "being rebuilt … retry shortly"; anything else fails."""
        answer = _search(config, "重建索引", check=False)
        if isinstance(answer, dict):
            return _paths(answer) == {"memory/2026-11-01.md"}
        assert "being rebuilt" in answer.stderr and "retry shortly" in answer.stderr, answer.stderr
        return False

    wait_for(found_once_rebuilt, what="rebuilt while running")


def test_hostile_queries_through_the_cli_return_normally(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    daemons(config)
    for query in ['"', "*", "NEAR(", "a:b", "x" * 4096]:  # 4,096: the longest query (daemon/common/daemon_limits.py)
        proc = run_cli("search", query, "--agent", "main", "--json", config=config, check=False)
        assert "Traceback" not in proc.stderr, query
        if proc.returncode == 0:
            assert isinstance(json.loads(proc.stdout)["results"], list)
        else:
            assert proc.returncode == 2 and "nothing to search for" in proc.stderr, (query, proc.stderr)
    too_long = run_cli("search", "x" * 10_000, "--agent", "main", config=config, check=False)
    assert too_long.returncode == 2 and "the limit is 4,096" in too_long.stderr and "Traceback" not in too_long.stderr
    empty = run_cli("search", "。，", "--agent", "main", config=config, check=False)
    assert empty.returncode == 2 and "nothing to search for" in empty.stderr  # the daemon's 400: a usage error


def test_search_and_local_search_work_with_the_daemon_down(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / "memory" / "2026-11-02.md").write_text("offline recall: 离线检索\n")
    wait_for(lambda: _paths(_search(config, "离线检索")) == {"memory/2026-11-02.md"})
    assert d.stop() == 0
    answer = _search(config, "离线检索")
    assert _paths(answer) == {"memory/2026-11-02.md"}
    assert "daemon" in answer["vectors"] and "not running" in answer["vectors"]
    script = REPO_ROOT / "skills" / "mem0-integration" / "local_search.py"
    proc = subprocess.run(
        ["/usr/bin/env", "python3", str(script), "离线检索", "--agent", "main", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert _paths(data) == {"memory/2026-11-02.md"} and data["degraded"] is True
    bad = subprocess.run(
        [sys.executable, str(script), "x", "--agent", "nobody", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "unknown agent" in bad.stderr


def test_reindex_offline_and_through_the_daemon(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    ws = tmp_path / "workspace"
    (ws / "memory" / "2026-11-03.md").write_text("indexed by reindex\n")
    offline = json.loads(run_cli("reindex", "--json", config=config).stdout)
    assert offline["main"]["changed"] >= 1
    assert _paths(_search(config, "reindex")) == {"memory/2026-11-03.md"}
    d = daemons(config)
    again = json.loads(run_cli("reindex", "--agent", "main", "--json", config=config).stdout)
    assert again["main"]["changed"] == 0, "nothing changed since: nothing rewritten"
    rebuilt = json.loads(run_cli("reindex", "--rebuild", "--json", config=config).stdout)
    assert rebuilt["main"]["rebuilt"] is True
    assert _paths(_search(config, "reindex")) == {"memory/2026-11-03.md"}
    assert "requested by memstrata reindex" in _index(d)["last_rebuild"]["reason"]
    no_vectors = run_cli("reindex", "--vectors", config=config, check=False)
    assert no_vectors.returncode == 1 and "vectors are off" in no_vectors.stderr


def _port_and_lunch_notes(tmp_path, daemons):
    """A running daemon whose agent has two daily notes, one about Qdrant's port and one about lunch, both
    embedded: a question about the port has one related note and one unrelated."""
    config = init_root(tmp_path, **FAST)
    ws = tmp_path / "workspace"
    d = daemons(config)
    (ws / "memory" / "2026-11-03.md").write_text("# 2026-11-03\n\n- The Qdrant server moved to port 6334.\n")
    (ws / "memory" / "2026-11-04.md").write_text("# 2026-11-04\n\n- Lunch: we tried the new ramen place.\n")
    wait_for(lambda: _index(d)["pending_embeddings"] == 0 and _paths(_search(config, "ramen")), timeout=120)
    return config, d


def test_a_threshold_on_l3_search_means_what_it_means_on_l4(tmp_path, daemons):
    """Issue 23: a threshold is on the one relevance scale (the real e5 model's calibrated cosine);
    the unrelated notes that hybrid search's vector list always brings are left out under it."""
    config, d = _port_and_lunch_notes(tmp_path, daemons)
    plain = _search(config, "which port does the vector database listen on", "--explain")
    assert plain["vectors"] == "used" and plain["threshold"] is None
    assert all(0 <= r["relevance"] <= 1 for r in plain["results"] if r["relevance"] is not None)
    assert "memory/2026-11-03.md" in _paths(plain)
    kept = _search(config, "which port does the vector database listen on", "--threshold", "0.3")
    assert kept["threshold"]["applied"] == "relevance" and kept["threshold"]["dropped"] >= 1
    assert "memory/2026-11-03.md" in _paths(kept) and "memory/2026-11-04.md" not in _paths(kept)
    assert all(r["relevance"] >= 0.3 for r in kept["results"])
    human = run_cli(
        "search",
        "which port does the vector database listen on",
        "--threshold",
        "0.3",
        "--agent",
        "main",
        config=config,
    )
    assert "under the threshold 0.3 left out" in human.stderr
    bad = run_cli("search", "port", "--threshold", "1.5", "--agent", "main", config=config, check=False)
    assert bad.returncode == 2 and "1.5" in bad.stderr
    assert d.stop() == 0
    offline = _search(config, "ramen lunch", "--threshold", "0.5")
    assert offline["threshold"]["applied"].startswith("full matches only")
    assert _paths(offline) == {"memory/2026-11-04.md"}, "a full match stays: there is no vector to measure"
    relaxed = _search(config, "ramen station", "--threshold", "0.5")
    assert relaxed["results"] == [] and relaxed["threshold"]["dropped"] >= 1, "a partial match does not"


def test_min_score_keeps_the_results_likely_to_answer_on_one_scale_online_and_offline(tmp_path, daemons):
    """Issue 24: every L3 result has a confidence (0-1, the chance it is the passage that answers); `--min-score`
    leaves out those under it, through the daemon (hybrid, the real e5 cosine counted) and without it (full text)."""
    config, d = _port_and_lunch_notes(tmp_path, daemons)
    question = "which port does the qdrant server listen on"
    plain = _search(config, question, "--explain")
    assert plain["vectors"] == "used" and plain["min_score"] is None
    by_path = {r["path"]: r for r in plain["results"]}
    assert all(0 < r["confidence"] < 1 and -1 <= r["cosine"] <= 1 for r in plain["results"])
    port, ramen = by_path["memory/2026-11-03.md"]["confidence"], by_path["memory/2026-11-04.md"]["confidence"]
    assert port > ramen
    cut = round((port + ramen) / 2, 3)
    kept = _search(config, question, "--min-score", str(cut))
    assert _paths(kept) == {r["path"] for r in plain["results"] if r["confidence"] >= cut}
    assert "memory/2026-11-03.md" in _paths(kept) and "memory/2026-11-04.md" not in _paths(kept)
    assert kept["min_score"]["value"] == cut and kept["min_score"]["dropped"] >= 1
    human = run_cli("search", question, "--min-score", str(cut), "--agent", "main", config=config)
    assert "confidence" in human.stdout and "with confidence under" in human.stderr
    l4 = run_cli(
        "search", "port", "--layer", "conversation", "--min-score", "0.5", "--agent", "main", config=config, check=False
    )
    assert l4.returncode == 2 and "--min-score is for L3" in l4.stderr
    assert d.stop() == 0
    offline = _search(config, "qdrant port", "--min-score", "0.01")
    assert offline["vectors"].startswith("unavailable") and _paths(offline) == {"memory/2026-11-03.md"}
    assert 0 < offline["results"][0]["confidence"] < 1 and offline["min_score"]["dropped"] == 0


def test_max_tokens_cuts_the_answer_through_the_daemon_and_without_it(tmp_path, daemons):
    """`memstrata search --max-tokens`: the passage around the line that matched, counted in `budget`, the same with the
    daemon down (read-only offline path); the translated list finds the Chinese note for an English question."""
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    d = daemons(config)
    long_note = "## 迁移\n- 13:40 moth up on 10.88.1.11\n" + "".join(
        f"- 第 {i} 条：整理机柜和网线\n" for i in range(40)
    )
    (ws / "memory" / "2026-08-08.md").write_text(long_note)
    (ws / "memory" / "2026-07-07.md").write_text("## 标点数据\n- 第一批抽检 200 张，准确率 96.3%\n")
    wait_for(lambda: _paths(_search(config, "10.88.1.11")) == {"memory/2026-08-08.md"}, what="indexed")
    for attempt in ("daemon", "offline"):
        answer = _search(config, "moth 10.88.1.11", "--max-tokens", "30")
        (hit,) = answer["results"]
        # the focus line, grown by the lines around it while the budget allows (issue 50), never the whole chunk
        first, last = hit["passage"]
        assert "- 13:40 moth up on 10.88.1.11" in hit["text"].splitlines() and first <= 2 <= last, attempt
        assert not hit["whole"] and last < 43, attempt
        assert answer["budget"]["max_tokens"] == 30 and answer["budget"]["used"] <= 30
        shown = run_cli("search", "moth 10.88.1.11", "--agent", "main", "--max-tokens", "30", config=config)
        assert "of 30 tokens" in shown.stderr and "13:40 moth up" in shown.stdout
        found = _search(config, "What accuracy did the spot check get?")
        assert "fts:translated" in found["lists"] and "memory/2026-07-07.md" in _paths(found), attempt
        if attempt == "daemon":
            assert d.stop() == 0
