"""The hosts the hub's peer API serves (daemon/ops/fleet_peers.py), read as the API reads them."""

from __future__ import annotations

import os

from daemon.ops import fleet_peers


def test_the_table_follows_the_file_and_keeps_the_last_good_one_when_it_breaks(tmp_path):
    state = tmp_path / "state"
    table = fleet_peers.PeerTable(state)
    assert table.peer_of("anything") is None and table.hosts() == []
    fleet_peers.add_host(state, "spoke-1", ["main", "ops"], tmp_path / "spoke-1.key")
    key = (tmp_path / "spoke-1.key").read_text().strip()
    assert table.peer_of(key) == fleet_peers.Peer("spoke-1", ("main", "ops"))
    assert table.peer_of(key + "x") is None and table.peer_of("") is None and table.peer_of(None) is None

    path = fleet_peers.peers_path(state)
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700" and key not in path.read_text()
    path.write_text("{ not json")
    os.utime(path, ns=(1, 1))  # another mtime, whatever the clock's resolution
    assert table.peer_of(key) is not None and "cannot be read" in table.error  # the last good table stays

    path.unlink()
    assert table.peer_of(key) is None  # no file: no host
