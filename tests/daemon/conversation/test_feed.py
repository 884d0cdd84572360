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
