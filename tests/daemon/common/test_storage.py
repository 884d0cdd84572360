"""StorageHealth: which errors are a full or read-only disk, back-off, one log line per condition."""

from __future__ import annotations

import errno
import logging

import apsw
import pytest

from daemon.common.storage import MAX_RETRY_S, StorageHealth, is_storage_error, is_storage_message


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_full_quota_and_read_only_disks_are_storage_errors(code):
    assert is_storage_error(OSError(code, "refused", "/state/x"))


def test_sqlite_and_git_words_for_a_full_disk_are_recognised_through_wrappers():
    assert is_storage_error(apsw.FullError("database or disk is full"))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise ConnectionError("add: failed") from inner
    except ConnectionError as outer:
        assert is_storage_error(outer)
    assert is_storage_message("git add failed: fatal: unable to write loose object file: No space left on device")
    assert not is_storage_error(OSError(errno.EACCES, "Permission denied"))
    assert not is_storage_error(ValueError("bad request"))


def test_a_condition_is_logged_once_backs_off_to_a_minute_and_clears_itself(caplog):
    changes = []
    health = StorageHealth(on_change=lambda: changes.append(1))
    with caplog.at_level(logging.INFO, logger="daemon.common.storage"):
        for _ in range(10):
            health.failed("records", OSError(errno.ENOSPC, "No space left on device", "/s/a.json"), subject="a")
        [problem] = health.snapshot()["problems"]
        assert problem["failures"] == 10 and problem["path"] == "/s/a.json"
        assert MAX_RETRY_S - 1 < problem["retry_in_s"] <= MAX_RETRY_S
        assert health.due(["records"], now=0) == [] and health.due(["records"], now=1e12) == [("records", "a")]
        assert health.due(["queue"], now=1e12) == []
        health.succeeded("records", "a")
    assert [r.levelname for r in caplog.records] == ["ERROR", "INFO"]  # failed once, recovered once
    assert health.snapshot() == {"ok": True, "problems": []} and len(changes) == 2


def test_attempt_notes_storage_errors_and_raises_anything_else():
    health = StorageHealth()

    def full():
        raise OSError(errno.ENOSPC, "No space left on device")

    assert health.attempt("tokens", full) is False and health.failing("tokens")
    assert health.attempt("tokens", lambda: None) is True and not health.failing("tokens")
    with pytest.raises(PermissionError):
        health.attempt("tokens", lambda: (_ for _ in ()).throw(PermissionError(errno.EACCES, "denied")))
