"""A memory file swapped for a symlink or a FIFO while the daemon reads it is never read through.

Before: the daemon checked a file by name and then opened it by name three more times
(secret scan, index read, commit).  A file that took seconds to scan (a few MB of lines
full of never_store keywords), replaced by a symlink to another agent's MEMORY.md (or a
root-only file) after the daemon's first read, had the target's text in the agent's
index, returned by its own search and still there after ``reindex``; replaced by a FIFO,
the loop thread blocked in ``open()`` and SIGTERM was ignored.

Now a file is opened once per version, without following a symlink in any component,
non-blocking, checked on its fd, and the same bytes go to the guard and the index.  The
race is run for real: a process of the agent (its own Unix user, or root) waits for the
daemon's first read of the file (its atime moves) and swaps the name at that moment.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest

from tests.failure_modes.unix_users import chown_tree, second_user
from tests.helpers import LEAN, init_root, run_cli, wait_for

ROUNDS = 20
FIFO_ROUNDS = 5
MARKER = "zebraquokka" + "betaonly"  # in beta's MEMORY.md and a root-only file, nowhere else
# Lines the guard's generic rules must look at (keyword "password", an assignment) but that hold no
# secret: a few MB of them take the old code seconds to scan, a wide window between its reads.
SLOW_LINE = "- password = see the vault entry for the staging database, rotated monthly\n"
SLOW_MB = 3


def _setup(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    config = init_root(tmp_path, **LEAN)
    ws = tmp_path / "workspace"
    for agent in ("alpha", "beta"):
        run_cli("agent", "add", agent, config=config)
    alpha, beta = ws / "agents" / "alpha-workspace", ws / "agents" / "beta-workspace"
    (beta / "MEMORY.md").write_text(f"# MEMORY\n\n- {MARKER}: beta's private note\n")
    root_only = tmp_path / "root-only.txt"
    root_only.write_text(f"{MARKER} root's own file\n")
    root_only.chmod(0o600)
    return config, alpha, beta / "MEMORY.md", root_only


def _write_slow_file(path: Path, owner: tuple[int, int] | None) -> int:
    """A file that takes a while to scan, its atime set in the past so the first read moves it."""
    path.write_text(SLOW_LINE * (SLOW_MB * 1024 * 1024 // len(SLOW_LINE)))
    if owner:
        os.chown(path, *owner)
    st = os.stat(path)
    old = st.st_mtime_ns - 10**9
    os.utime(path, ns=(old, st.st_mtime_ns))
    return old


def _swap_when_read(path: Path, replacement: Path, old_atime: int, owner: tuple[int, int] | None) -> str:
    """In a child process of the agent (its uid, or root): when the atime moves, rename ``replacement`` over ``path``.

    A fork, not a new interpreter: the agent's user may not be allowed to run this virtualenv's python.
    """
    pid = os.fork()
    if pid == 0:  # the agent
        code = 3
        try:
            if owner:
                os.setgroups([])
                os.setgid(owner[1])
                os.setuid(owner[0])
            deadline = time.monotonic() + 60
            code = 1
            while os.stat(path).st_atime_ns == old_atime and time.monotonic() < deadline:
                time.sleep(0.0005)
            if os.stat(path).st_atime_ns != old_atime:
                os.rename(replacement, path)
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {0: "swapped", 1: "never read"}.get(os.waitstatus_to_exitcode(status), f"failed: {status}")


def _index_files(tmp_path: Path, agent: str) -> list[Path]:
    return sorted((tmp_path / "agents" / agent / "memstrata").glob("index.sqlite*"))


def _leaks(tmp_path: Path, config: Path) -> list[str]:
    """Where alpha's side holds the marker: its search answers, its index file's raw bytes."""
    found = []
    out = run_cli("search", MARKER, "--agent", "alpha", "--json", "--mode", "fts", config=config).stdout
    found += [f"search: {r.get('path')}" for r in json.loads(out)["results"]]
    for path in _index_files(tmp_path, "alpha"):
        if MARKER.encode() in path.read_bytes():
            found.append(f"raw bytes of {path.name}")
    return found


@pytest.fixture
def reachable_root() -> Iterator[Path]:
    """A root the agent's user can reach (pytest's own tmp_path lies under a 0700 directory of root's)."""
    root = Path(tempfile.mkdtemp(prefix="memstrata-swap-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("as_agent_user", [True, False], ids=["agent-user", "root"])
def test_a_file_swapped_for_a_symlink_after_the_first_read_never_leaks(reachable_root, daemons, as_agent_user):
    tmp_path = reachable_root
    config, alpha, beta_memory, root_only = _setup(tmp_path)
    with second_user() if as_agent_user else nullcontext() as user:
        owner = (user.pw_uid, user.pw_gid) if user else None
        if owner:
            chown_tree(alpha, user)
            for directory in (alpha.parent.parent, alpha.parent):  # how a host with a user per agent sets them
                directory.chmod(0o711)
        d = daemons(config)
        names = []
        for n in range(ROUNDS):
            rel = f"memory/2026-10-{n + 1:02d}.md"
            names.append(rel)
            target = beta_memory if n % 2 == 0 else root_only
            link = alpha / f".swap-{n}"
            link.symlink_to(target)
            if owner:
                os.lchown(link, *owner)
            old_atime = _write_slow_file(alpha / rel, owner)
            said = _swap_when_read(alpha / rel, link, old_atime, owner)
            assert said == "swapped", f"round {n}: the daemon never read {rel}: {said}\n{d.log()[-2000:]}"
            assert (alpha / rel).is_symlink()

        def all_skipped() -> bool:
            skipped = {s["path"]: s["reason"] for s in d.agent("alpha")["skipped"]}
            return all("symbolic link" in skipped.get(rel, "") for rel in names)

        wait_for(all_skipped, timeout=120, what="every swapped name reported as a symlink, never followed")
        assert _leaks(tmp_path, config) == []
        run_cli("reindex", "--agent", "alpha", config=config)
        assert _leaks(tmp_path, config) == []
        # the marker is findable where it belongs: the check above could have seen it
        out = run_cli("search", MARKER, "--agent", "beta", "--json", "--mode", "fts", config=config).stdout
        assert [r["path"] for r in json.loads(out)["results"]] == ["MEMORY.md"]
        assert d.stop() == 0


def test_a_file_swapped_for_a_fifo_after_the_first_read_blocks_nothing(tmp_path, daemons):
    config, alpha, _, _ = _setup(tmp_path)
    d = daemons(config)
    names = [f"memory/2026-10-{n + 1:02d}.md" for n in range(FIFO_ROUNDS)]
    for n, rel in enumerate(names):
        fifo = alpha / f".swap-fifo-{n}"
        os.mkfifo(fifo)
        old_atime = _write_slow_file(alpha / rel, None)
        assert _swap_when_read(alpha / rel, fifo, old_atime, None) == "swapped"
    (alpha / "MEMORY.md").write_text("# MEMORY\n\n- work goes on after the FIFO\n")

    def found() -> list:
        out = run_cli("search", "FIFO", "--agent", "alpha", "--json", "--mode", "fts", config=config).stdout
        return [r["path"] for r in json.loads(out)["results"]]

    assert wait_for(found, timeout=60, what="the loop thread is not stuck on a FIFO") == ["MEMORY.md"]

    def all_skipped() -> dict:
        skipped = {s["path"]: s["reason"] for s in d.agent("alpha")["skipped"]}
        return skipped if set(names) <= set(skipped) else {}

    skipped = wait_for(all_skipped, what="every FIFO reported")
    assert all("not a regular file" in skipped[rel] for rel in names), skipped
    started = time.monotonic()
    assert d.stop(timeout=30) == 0
    assert time.monotonic() - started < 10, "SIGTERM is obeyed"
