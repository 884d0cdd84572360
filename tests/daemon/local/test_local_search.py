"""daemon/local/search.py: an L3 search from an API thread; a broken index is rebuilt by the loop, not by the search."""

from __future__ import annotations

import pytest

from protocol.operations import Search


def test_an_unknown_agent_is_a_lookup_error(service):
    with pytest.raises(LookupError, match="unknown agent 'nobody'"):
        service.daemon.search(Search("nobody", "anything"))


def test_a_missing_index_is_rebuilt_by_the_loop_and_then_answers(service):
    d = service.daemon
    (service.workspace / "MEMORY.md").write_text("# MEMORY\na note about the loquat harvest\n")
    d.reconciler.all()
    index = d.trackers["main"].agent.index
    d.indexer.forget("main")  # its writer connection closed, as after a crash
    for suffix in ("", "-wal", "-shm"):
        index.with_name(index.name + suffix).unlink(missing_ok=True)
    with pytest.raises(RuntimeError, match="being rebuilt from markdown"):
        d.search(Search("main", "loquat"))
    assert d.jobs.run_pending(), "the search handed the repair to the loop"
    assert [h["path"] for h in d.search(Search("main", "loquat"))["results"]] == ["MEMORY.md"]


def test_a_damaged_index_is_reported_and_repaired(service):
    d = service.daemon
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nthe medlar tree\n")
    d.reconciler.all()
    index = d.trackers["main"].agent.index
    d.indexer.forget("main")
    for suffix in ("-wal", "-shm"):
        index.with_name(index.name + suffix).unlink(missing_ok=True)
    index.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)
    with pytest.raises(RuntimeError, match="rebuilt"):
        d.search(Search("main", "medlar"))
    d.jobs.run_pending()
    assert [h["path"] for h in d.search(Search("main", "medlar"))["results"]] == ["MEMORY.md"]
