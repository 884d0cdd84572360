"""A Debian root file system to boot with systemd-nspawn, built once by debootstrap and cached.

The cache lives under ``.cache/system/rootfs-<hash>``, the hash taken over the whole
recipe (suite, mirror, variant, packages, the post-install steps): changing any of them
builds a new tree.  A build goes into a temporary directory that is renamed into place
only when complete, so an interrupted build never leaves a half tree that a later run
would boot.  Concurrent test runs serialise on a lock file; stale trees (other hashes)
are removed after a successful build.

The tree is never modified by the tests: containers boot it with ``--volatile=overlay``
(a tmpfs over the read-only tree, see :mod:`tests.system.container`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.helpers import REPO_ROOT

CACHE_DIR = REPO_ROOT / ".cache" / "system"

# What an operator's minimal Debian host has, plus what running the checkout's virtualenv needs.
RECIPE: dict = {
    "suite": "bookworm",
    "mirror": os.environ.get("MEMSTRATA_DEBIAN_MIRROR", "http://deb.debian.org/debian"),
    "variant": "minbase",
    "packages": [
        "systemd",  # PID 1, systemctl, systemd-analyze: the service under test
        "dbus",  # systemctl talks to PID 1 over the bus
        "git",  # L2
        "libsqlite3-0",  # the host python's _sqlite3 links it
        "libgomp1",  # llama.cpp (the local embedding model) links it
        "python3",  # "any python3" that runs the skill's scripts from a workspace (brings libssl3, libffi8)
        "cron",  # Debian's cron for cron.d/mem0-cleanup
        "openssh-server",  # the fleet's hub serves git over ssh (brings openssh-client: the spokes' git)
        "iproute2",  # `ip`: a fleet host's link is cut and restored from inside (tests/system/fleet.py)
    ],
    # Run in the tree after debootstrap (chroot): an empty apt cache keeps the tree small; the
    # locale file a full install has (else pam_env complains in cron's log for every job);
    # cron logs each job's start, end and a failed exit status (-L 15, cron(8)); sshd off by default
    # (only a fleet's hub runs it: tests/system/fleet.py enables it there with host keys of its own).
    "post": [
        "apt-get clean",
        "rm -rf /var/lib/apt/lists/*",
        "echo LANG=C.UTF-8 > /etc/default/locale",
        "echo 'EXTRA_OPTS=\"-L 15\"' >> /etc/default/cron",
        "systemctl disable ssh.service",
    ],
}
BUILD_TIMEOUT_S = 900


class RootfsBuildError(AssertionError):
    """debootstrap (or a post step) failed; the message carries its output."""


def recipe_hash(recipe: dict = RECIPE) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def rootfs_path(recipe: dict = RECIPE) -> Path:
    return CACHE_DIR / f"rootfs-{recipe_hash(recipe)}"


def ensure_rootfs(recipe: dict = RECIPE) -> Path:
    """The cached tree for ``recipe``, built first if it is missing (minutes, once)."""
    target = rootfs_path(recipe)
    if (target / "usr" / "lib" / "systemd" / "systemd").exists():
        return target
    for tool in ("debootstrap", "systemd-nspawn"):
        if not shutil.which(tool):
            raise RootfsBuildError(f"{tool} missing: `make system-deps` installs debootstrap and systemd-container")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "rootfs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building the same tree
        if (target / "usr" / "lib" / "systemd" / "systemd").exists():
            return target
        _build(recipe, target)
        _prune(keep=target)
    return target


def _build(recipe: dict, target: Path) -> None:
    tmp = target.with_name(f"{target.name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log = CACHE_DIR / f"{target.name}.log"
    command = [
        "debootstrap",
        f"--variant={recipe['variant']}",
        f"--include={','.join(recipe['packages'])}",
        recipe["suite"],
        str(tmp),
        recipe["mirror"],
    ]
    started = time.monotonic()
    try:
        with open(log, "w") as out:
            out.write(" ".join(command) + "\n")
            out.flush()
            for attempt in range(2):  # a second try for a mirror that dropped a download
                proc = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S)
                if proc.returncode == 0:
                    break
                out.write(f"debootstrap exited {proc.returncode} (attempt {attempt + 1})\n")
                out.flush()
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise RootfsBuildError(f"debootstrap failed ({proc.returncode}):\n{_tail(log)}")
            for step in recipe["post"]:
                proc = subprocess.run(["chroot", str(tmp), "/bin/sh", "-c", step], stdout=out, stderr=subprocess.STDOUT)
                if proc.returncode != 0:
                    raise RootfsBuildError(f"post step {step!r} failed ({proc.returncode}):\n{_tail(log)}")
            out.write(f"built in {time.monotonic() - started:.0f} s\n")
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _prune(keep: Path) -> None:
    """Remove trees of older recipes (and builds a killed run left behind)."""
    for path in CACHE_DIR.glob("rootfs-*"):
        if path != keep and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
