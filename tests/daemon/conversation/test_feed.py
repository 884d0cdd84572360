"""The hub's change feed (daemon/conversation/feed.py): order, what is settled, compaction, epochs, a restart."""

from __future__ import annotations

import stat
import uuid

import pytest

from daemon.conversation.feed import ChangeFeed, bump_epoch, feed_path


def test_a_change_in_flight_holds_back_every_row_after_it_until_it_ends(tmp_path):
    feed = ChangeFeed(feed_path(tmp_path))
    first = feed.begin(["a", "b"])
    second = feed.begin(["c"])
    feed.end(second)
    assert feed.since(0, 100) == ([], 0)  # c is done, but a and b are not: nothing may be served
    feed.end(first)
    assert feed.since(0, 100) == ([(1, "a"), (2, "b"), (3, "c")], 3)
    assert feed.since(1, 1) == ([(2, "b")], 3)
    assert stat.S_IMODE(feed_path(tmp_path).stat().st_mode) == 0o600


def test_a_restart_settles_everything_recorded_and_keeps_the_seq_and_epoch(tmp_path):
    feed = ChangeFeed(feed_path(tmp_path))
    feed.begin(["a"])  # never ended: the process died during the change
    epoch = feed.epoch
    feed.close()
    again = ChangeFeed(feed_path(tmp_path))
    assert again.since(0, 10) == ([(1, "a")], 1) and again.epoch == epoch
    again.end(again.begin(["b"]))
    assert again.since(1, 10) == ([(2, "b")], 2)


def test_compaction_moves_the_horizon_and_a_new_epoch_is_drawn_on_demand(tmp_path):
    feed = ChangeFeed(feed_path(tmp_path), max_entries=100)
    for i in range(250):
        feed.end(feed.begin([f"m{i}"]))
    feed.compact()
    assert feed.horizon == 150 and feed.since(feed.horizon, 1000)[0][0] == (151, "m150")
    epoch = feed.epoch
    feed.close()
    bump_epoch(tmp_path)  # an offline maintenance run on the hub's store
    assert ChangeFeed(feed_path(tmp_path)).epoch != epoch


def test_old_rows_are_compacted_after_the_retention(tmp_path):
    feed = ChangeFeed(feed_path(tmp_path), retention_s=0.0)
    feed.end(feed.begin(["a", "b"]))
    held = feed.begin(["c"])  # in flight: never compacted past
    feed.compact()
    assert feed.horizon == 2
    feed.end(held)
    assert feed.since(2, 10) == ([(3, "c")], 3)


def test_status_and_status_fleet_show_each_spokes_replica_lag_and_a_spokes_own_replica():
    from daemon.front.fleet_status import render
    from daemon.front.status import _replica_lines

    host = {"host": "spoke-1", "state": "ok", "heard_ago_s": 3.0, "agents": [], "l4_replica": None}
    document = {"top": "/srv/fleet", "silent_after_s": 900, "counts": {"hosts": 1}, "hosts": [host]}
    assert "L4 replica" not in render(document)
    host["l4_replica"] = {"seq": 1200, "lag": 7, "asked_s_ago": 1.0}
    assert "L4 replica: seq 1,200, lag 7" in render(document)

    spoke = {"replica": {"seq": 40, "lag": 2, "age_s": 3.0, "memories": 12, "rebuilds": 1, "last_error": None}}
    assert "12 memories at seq 40 (lag 2)" in _replica_lines(spoke)[0]  # type: ignore[arg-type]
    hub = {"feed": {"seq": 42, "horizon": 0, "spokes": {"spoke-1": {"seq": 40, "lag": 2, "asked_s_ago": 0.5}}}}
    assert _replica_lines(hub) == ["  change feed for the spokes: seq 42 (spoke-1 lag 2)"]  # type: ignore[arg-type]


def test_a_change_whose_ids_come_after_it_is_recorded_before_it_and_named_after(tmp_path):
    feed = ChangeFeed(feed_path(tmp_path))
    held = feed.begin(["a"])
    token = feed.begin_unknown()  # an inferred add: mem0 picks its ids
    feed.end(held)
    assert feed.since(0, 10) == ([(1, "a")], 1)
    feed.end(token, ["x", "y"])
    assert feed.since(1, 10) == ([(2, "x"), (3, "y")], 3)
    epoch = feed.epoch
    feed.close()
    assert ChangeFeed(feed_path(tmp_path)).epoch == epoch  # every such change named: nothing to rebuild


@pytest.mark.parametrize("ended", ["never (a crash)", "failed, touching what is not known"])
def test_a_change_with_unnamed_ids_at_a_crash_or_failure_makes_every_spoke_rebuild(tmp_path, ended):
    feed = ChangeFeed(feed_path(tmp_path))
    feed.end(feed.begin(["a"]))
    token = feed.begin_unknown()
    if ended != "never (a crash)":
        feed.end(token, None)
    epoch = feed.epoch
    assert feed.epoch == epoch  # while the daemon runs, spokes are not made to rebuild for it
    feed.close()
    again = ChangeFeed(feed_path(tmp_path))
    assert again.epoch != epoch and again.since(0, 10) == ([(1, "a")], 1)  # a new epoch: every spoke rebuilds
    drawn = again.epoch
    again.close()
    assert ChangeFeed(feed_path(tmp_path)).epoch == drawn  # once


def test_the_stores_add_tells_the_feed_before_mem0_writes_and_names_the_ids_after(tmp_path):
    """ConversationStore.add (mem0's own add, the path of inferred writes): the feed hears of it while the
    store does not hold the memory yet, and is given the memory's id once it does."""
    from daemon.common.config import DEFAULT_MODEL_PATH
    from layers.conversation.adapters.store import ConversationStore, NewMemory, StoreSettings
    from layers.local.models.vectors import LocalEmbedder

    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    store = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, embedder.dimension())
    store.connect()
    feed = ChangeFeed(feed_path(tmp_path))
    seen: list[tuple[str, int]] = []
    begin_unknown, end = feed.begin_unknown, feed.end

    def spy_begin() -> int:
        seen.append(("begin_unknown", store.count()))
        return begin_unknown()

    def spy_end(token: int, ids=()) -> None:
        seen.append(("end", store.count()))
        end(token, ids)

    feed.begin_unknown, feed.end = spy_begin, spy_end  # type: ignore[method-assign]
    store.feed = feed
    try:
        text, when = "the hub's feed hears of it first", "2026-12-07T00:00:00+00:00"
        [added] = store.add(NewMemory(str(uuid.uuid4()), "a", text, "knowledge", "private", None, when, None, None))
        assert seen == [("begin_unknown", 0), ("end", 1)]
        assert feed.since(0, 10) == ([(1, added["id"])], 1)
    finally:
        store.close()
        feed.close()
