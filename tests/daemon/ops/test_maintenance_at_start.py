"""Backup and cleanup started together with the daemon, on a fresh root (timers at boot).

Before: ``memstrata backup`` run right after the daemon came up failed with "conversation
store unreachable: not connected yet" (the embedded store opens a few seconds after READY),
and run while the daemon was still starting it failed on the state lock; on a fresh root
``{workspace}/logs/security`` (audit_dir, where the shipped cron lines redirect) did not
exist.  Now the daemon creates audit_dir at start, a maintenance command waits (bounded)
for the daemon and its store, a daemon starting while an offline backup holds the state
waits for it, and a store call queued behind a long one (a replay batch) is not timed out
for the time it waited in line.
"""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from daemon.common.jobs import StoreWorker
from tests.helpers import FAST, init_root, run_cli, wait_for


def _fresh_root(tmp_path):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    shutil.rmtree(tmp_path / "workspace" / "logs", ignore_errors=True)  # what a root made by hand lacks
    return config


def test_backup_and_cleanup_right_after_the_socket_appears_wait_for_the_store(tmp_path, daemons):
    config = _fresh_root(tmp_path)
    d = daemons(config, wait=False)
    wait_for(lambda: d.socket.exists(), timeout=60, what="the daemon's socket")
    backup = run_cli("backup", "--json", config=config, check=False)
    assert backup.returncode == 0, backup.stderr
    assert (tmp_path / "state" / "backups").is_dir() and json.loads(backup.stdout)["backup"]
    cleanup = run_cli("cleanup", "--dry-run", config=config, check=False)
    assert cleanup.returncode == 0, cleanup.stderr
    assert (tmp_path / "workspace" / "logs" / "security").is_dir(), "audit_dir made at start"
    assert d.status()["daemon"]["running"] and d.stop() == 0


def test_backup_started_with_the_daemon_succeeds_and_the_daemon_comes_up(tmp_path, daemons):
    """Whichever wins the state lock (the daemon, or the backup itself), both end well."""
    config = _fresh_root(tmp_path)
    d = daemons(config, wait=False)
    backup = run_cli("backup", config=config, check=False)
    assert backup.returncode == 0, backup.stderr
    wait_for(d._ready, timeout=90, what="daemon ready after the backup")
    assert (tmp_path / "workspace" / "logs" / "security").is_dir()
    assert d.stop() == 0


def test_a_daemon_starting_while_an_offline_backup_holds_the_state_waits_for_it(tmp_path, daemons):
    from daemon.common.settings import acquire_state_lock

    config = _fresh_root(tmp_path)
    lock = acquire_state_lock(tmp_path / "state", "memstrata backup")  # as an offline backup holds it
    try:
        d = daemons(config, wait=False)
        time.sleep(3)
        assert d.proc.poll() is None, f"the daemon gave up instead of waiting:\n{d.log()}"
        assert not d.socket.exists()
    finally:
        lock.close()
    wait_for(d._ready, timeout=60, what="daemon ready once the backup let go")
    assert d.stop() == 0


def test_an_offline_backup_on_a_fresh_root_backs_up_the_empty_store(tmp_path):
    config = _fresh_root(tmp_path)
    backup = run_cli("backup", "--json", config=config, check=False)
    assert backup.returncode == 0, backup.stderr
    assert json.loads(backup.stdout)["backup"].startswith(str(tmp_path / "state" / "backups"))


def test_a_store_call_queued_behind_a_long_one_is_not_timed_out_for_its_wait():
    worker = StoreWorker()
    release = threading.Event()
    long_job = worker.submit(lambda: release.wait(10) and "replayed", deadline=30)
    short_job = worker.submit(lambda: "searched", deadline=0.5)
    threading.Timer(1.5, release.set).start()  # the batch ahead takes 3x the short call's deadline
    assert worker.wait(short_job, 0.5) == "searched"
    assert worker.wait(long_job, 30) == "replayed"

    hung = worker.submit(lambda: time.sleep(3), deadline=0.5)  # a job ahead past its own deadline
    behind = worker.submit(lambda: "never waited for", deadline=0.5)
    with pytest.raises(TimeoutError):
        worker.wait(behind, 0.5)
    hung.result(10)
    worker.stop()
