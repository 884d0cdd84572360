"""The hub's change feed (daemon/conversation/feed.py): order, what is settled, compaction, epochs, a restart."""

from __future__ import annotations

import stat

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
