"""Who holds a lock file: this process as the kernel knows it, and whether such a holder still runs.

A lock left by a process that died (SIGKILL, a power cut) must be told from one a live process
holds.  A pid alone cannot: after a reboot, or in another pid namespace (a daemon run under
``unshare -p`` sees itself as pid 1), the number belongs to someone else.  So a holder is named by
the pid ``/proc`` shows (the host's, whatever namespace this runs in), the process's start time
(field 22 of ``/proc/PID/stat``, in clock ticks since boot) and the boot id; it is alive only
while all three still match.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _start_time(pid: int | str) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: the fields after the last ')' count
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return BOOT_ID.read_text().strip()
    return ""


def this_process() -> dict[str, str | int]:
    """This process as a lock record names it (pid as /proc sees it, start time, boot id)."""
    try:
        pid: int | str = int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        pid = os.getpid()
    return {"pid": pid, "start": _start_time(pid) or "", "boot": _boot_id()}


def alive(holder: dict) -> bool:
    """Whether the process a record names still runs (a record without a start time: by pid alone)."""
    if holder.get("boot") and holder["boot"] != _boot_id():
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = _start_time(pid)
    if start is None:
        return False
    return not holder.get("start") or holder["start"] == start
