"""Small real file systems for failure tests: a tmpfs mounted by the test and filled to the brim.

Needs root (CI runs as root); a test fails, never skips, when mounting is not allowed here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

FILLER = ".filler"
MAX_FILL_BYTES = 256 << 20  # a mount larger than this is not one of ours


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


class Tmpfs:
    """A tmpfs of ``size`` at ``path``; :meth:`fill` leaves not one free byte, :meth:`free` gives it back."""

    def __init__(self, path: Path, size: str = "8m") -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        proc = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
        if proc.returncode != 0:
            pytest.fail(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")
        self.mounted = True

    @property
    def filler(self) -> Path:
        return self.path / FILLER

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def _check_small_tmpfs(self) -> None:
        """Never fill anything but our own small mount (filling the host's disk hurts everyone)."""
        st = os.statvfs(self.path)
        assert self.mounted and os.path.ismount(self.path), f"{self.path} is not a mount point"
        assert st.f_blocks * st.f_frsize <= MAX_FILL_BYTES, f"{self.path} is no small tmpfs: refusing to fill it"

    def fill(self) -> None:
        """Allocate every free block, then write byte by byte until the kernel says ENOSPC."""
        self._check_small_tmpfs()
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with contextlib.suppress(OSError):
                os.posix_fallocate(fd, 0, max(self.free_bytes(), 1))
            os.lseek(fd, 0, os.SEEK_END)
            for chunk in (1 << 16, 1 << 12, 1):
                while True:
                    try:
                        os.write(fd, b"\0" * chunk)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)
        assert self.free_bytes() == 0, f"{self.path} still has {self.free_bytes()} bytes free"

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted and _run("umount", str(self.path)).returncode != 0:
            _run("umount", "-l", str(self.path))  # something still holds a file: detach it anyway
        self.mounted = False


def bind_readonly(path: Path) -> None:
    """Bind ``path`` over itself read-only: every write below it fails with EROFS."""
    for cmd in (("mount", "--bind", str(path), str(path)), ("mount", "-o", "remount,bind,ro", str(path))):
        proc = _run(*cmd)
        if proc.returncode != 0:
            _run("umount", str(path))
            pytest.fail(f"cannot bind-mount read-only here (needs root): {proc.stderr.strip()}")


def unmount(path: Path) -> None:
    if _run("umount", str(path)).returncode != 0:
        _run("umount", "-l", str(path))


def mounts():
    """A fixture body: yields a factory that mounts tmpfs instances, all unmounted at the end.

    Request it before ``daemons`` so that the daemons stop before their disks go away.
    """
    mounted: list[Tmpfs] = []

    def mount(path: Path, size: str = "8m") -> Tmpfs:
        fs = Tmpfs(path, size)
        mounted.append(fs)
        return fs

    yield mount
    for fs in reversed(mounted):
        fs.unmount()


def admin_status(daemon, state_dir: Path) -> dict:
    """``/v1/status`` as the administrator (when its token could be written), else without a token."""
    from daemon.common.tokens import read_token
    from daemon.front.daemon_client import DaemonClient

    with DaemonClient(daemon.socket, timeout=10, token=read_token(state_dir / "admin.token")) as client:
        return client.status()


def storage_places(status: dict) -> set[str]:
    """The places whose writes fail, as the daemon reports them."""
    return {p["place"] for p in (status.get("storage") or {}).get("problems", [])}
