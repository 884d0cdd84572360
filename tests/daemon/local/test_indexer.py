"""daemon/local/indexer.py: every agent's L3 index in step with its markdown (real apsw), the shared core in each."""

from __future__ import annotations

import apsw

from protocol.operations import Search


def test_the_shared_core_is_in_every_agents_index(service):
    d = service.daemon
    (service.workspace / "shared" / "NOTE.md").write_text("# note\nthe cluster keeps tamarind\n")
    service.spoke_workspace()
    d.reconciler.all()
    for agent in ("main", "beta"):
        assert [h["path"] for h in d.search(Search(agent, "tamarind"))["results"]] == ["shared/NOTE.md"], agent


def test_settled_files_are_written_at_flush_and_the_report_says_so(service):
    d = service.daemon
    tracker = d.trackers["main"]
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nguava season\n")
    tracker.process("MEMORY.md")  # the indexer is the tracker's listener: queued, not yet written
    assert d.indexer.queued() >= 1 and d.search(Search("main", "guava"))["results"] == []
    assert d.indexer.flush() >= 1
    assert [h["path"] for h in d.search(Search("main", "guava"))["results"]] == ["MEMORY.md"]
    report = d.indexer.report("main")
    assert report["path"] == str(tracker.agent.index) and report.get("queued_updates", 0) == 0


def test_a_foreign_file_at_the_index_path_is_refused_not_replaced(service):
    d = service.daemon
    service.spoke_workspace()
    from daemon.common.workspaces import make_agent

    index = make_agent(d.config, "beta").index
    index.parent.mkdir(parents=True, exist_ok=True)
    foreign = apsw.Connection(str(index))
    foreign.execute("CREATE TABLE theirs(x); INSERT INTO theirs VALUES (1)")
    foreign.close()
    before = index.read_bytes()
    d.reconciler.all()
    assert d.indexer.refused("beta"), "refused, with the reason"
    assert index.read_bytes() == before, "left as it was"
    assert d.indexer.report("beta")["state"] == "refused"
