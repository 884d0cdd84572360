"""A simulated power cut: a whole memstrata root on a loop-mounted ext4 image, copied the instant it is cut.

The method (measured in the research for issue 45, docs/durability.md "How it is tested"):

- the root (configuration, state directory, workspaces) lives on an ext4 image mounted through a
  loop device with ``commit=600,noauto_da_alloc``: nothing reaches the image unless someone syncs
  it, for ten minutes (the journal commits every 600 s, delayed allocation is not forced out on a
  rename or truncate, and the kernel writes dirty pages back only after 30 s);
- the daemon runs under ``unshare -fp --kill-child``: its own pid namespace, so one SIGKILL ends
  it *and* every git it started (they run in sessions of their own: a kill of the daemon's
  process group would miss them);
- the cut: SIGKILL everything, then at once ``cp --sparse=always`` of the image (what the upper
  file system had submitted to the device, not what sat in its page cache), ``e2fsck -fy`` of
  the copy (replays the journal as a boot would), ``e2fsck -fn`` must then find it clean;
- the copy is mounted at the same path (the configuration holds absolute paths) and the next
  daemon starts on it: the daemon that checks what survived, and then the one the next
  operation runs on.

What it cannot show: writeback the kernel does on its own only ever *adds* data to the image, so
a run may keep something no sync covered.  The checks therefore assert "every acknowledged item
is there exactly once" and "every repository passes ``git fsck``", never "an unacknowledged item
is gone".

Root only (loop devices, mounts): :data:`needs_loop_devices` skips elsewhere, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient, DaemonUnavailableError
from tests.helpers import seed_dictionary, wait_for

IMAGE_SIZE = "1G"  # a backup put back keeps the replaced store beside the restored one (unsparse WAL)
MOUNT_OPTIONS = "commit=600,noauto_da_alloc"
KILL_TIMEOUT_S = 10.0


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout}")
    return proc


def loop_devices_usable() -> str:
    """Why power cuts cannot be simulated here ("" when they can)."""
    if os.geteuid() != 0:
        return "a simulated power cut needs root (loop devices, mounts)"
    missing = [tool for tool in ("losetup", "mkfs.ext4", "e2fsck", "unshare", "fuser") if not shutil.which(tool)]
    if missing:
        return f"a simulated power cut needs {', '.join(missing)}"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control: this kernel or container has no loop devices"
    return ""


needs_loop_devices = pytest.mark.skipif(bool(loop_devices_usable()), reason=loop_devices_usable() or "usable")


class LoopDisk:
    """An ext4 image on a loop device mounted at :attr:`mount`; :meth:`cut` swaps it for its copy at the cut."""

    def __init__(self, workdir: Path, size: str = IMAGE_SIZE) -> None:
        self.workdir = workdir
        self.size = size  # sparse: only what is written takes room
        self.mount = workdir / "mnt"
        self.images = (workdir / "disk-a.img", workdir / "disk-b.img")
        self.current = 0
        self.loop: str | None = None
        self.cuts = 0

    @property
    def image(self) -> Path:
        return self.images[self.current]

    def create(self) -> None:
        self.mount.mkdir(parents=True, exist_ok=True)
        _run("truncate", "-s", self.size, str(self.image))
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(self.image))
        self._attach()

    def _attach(self) -> None:
        self.loop = _run("losetup", "-f", "--show", str(self.image)).stdout.strip()  # atomic: a free one, taken
        try:
            _run("mount", "-o", MOUNT_OPTIONS, self.loop, str(self.mount))
        except AssertionError:
            _run("losetup", "-d", self.loop, check=False)
            self.loop = None
            raise

    def sync(self) -> None:
        """Everything so far on the image: the state a root has had for long before the test."""
        _run("sync", "-f", str(self.mount))

    def _detach(self) -> None:
        if os.path.ismount(self.mount) and _run("umount", str(self.mount), check=False).returncode != 0:
            _run("umount", "-l", str(self.mount), check=False)
        if self.loop is not None:
            _run("losetup", "-d", self.loop, check=False)
            self.loop = None

    def cut(self) -> float:
        """The image as the device held it now becomes the disk (call once every writer is dead);
        the seconds the copy took."""
        other = 1 - self.current
        started = time.monotonic()
        _run("cp", "--sparse=always", str(self.image), str(self.images[other]))
        took = time.monotonic() - started
        self._detach()
        self.images[self.current].unlink(missing_ok=True)
        self.current = other
        self.cuts += 1
        replay = _run("e2fsck", "-fy", str(self.image), check=False)  # replays the journal, as a boot would
        assert replay.returncode in (0, 1), f"e2fsck -fy, cut {self.cuts}: exit {replay.returncode}\n{replay.stdout}"
        clean = _run("e2fsck", "-fn", str(self.image), check=False)
        assert clean.returncode == 0, f"the file system after cut {self.cuts} is not clean:\n{clean.stdout}"
        self._attach()
        return took

    def close(self) -> None:
        self._detach()
        for image in self.images:
            image.unlink(missing_ok=True)


def processes_on(mount: Path) -> list[int]:
    """Pids with a file, directory or map open on the mount (``fuser -m``); none when nothing is mounted there.

    ``fuser -m`` of a plain directory names every process of the file system holding it (the root's:
    every process on the machine), which the caller would then SIGKILL."""
    if not os.path.ismount(mount):
        return []
    out = _run("fuser", "-m", str(mount), check=False).stdout
    return [int(p) for p in out.split() if p.strip().isdigit()]


class CutDaemon:
    """``memstrata run`` in a pid namespace of its own: :meth:`kill` ends it and all it started at once."""

    def __init__(self, config: Path, socket: Path, state_dir: Path, log_path: Path, env: dict[str, str]) -> None:
        self.config = config
        self.socket = socket
        self.state_dir = state_dir
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> CutDaemon:
        seed_dictionary(self.state_dir)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "-fp", "--kill-child", sys.executable, "-m", "daemon", "--config", str(self.config), "run"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        wait_for(self._ready, timeout=90, what=f"daemon ready\n{self.log()[-4000:]}")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
        try:
            daemon = self.status()["daemon"]
        except DaemonUnavailableError:
            return False
        return bool(daemon["running"]) and not daemon.get("starting")

    def admin_token(self) -> str:
        return (self.state_dir / "admin.token").read_text().strip()

    def client(self, token: str | None = None, timeout: float = 60) -> DaemonClient:
        return DaemonClient(self.socket, timeout=timeout, token=token or self.admin_token())

    def status(self) -> dict:
        with self.client(timeout=10) as client:
            return client.status()

    def agent(self, agent_id: str) -> dict:
        return next(a for a in self.status()["agents"] if a["id"] == agent_id)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self, mount: Path) -> None:
        """SIGKILL the namespace's init (unshare's child dies with it, and the kernel kills the rest); then
        make sure nothing is left with a file open on ``mount``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=KILL_TIMEOUT_S)
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while pids := processes_on(mount):
            own = [p for p in pids if p != os.getpid()]
            if not own:
                break
            for pid in own:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert time.monotonic() < deadline, f"processes {own} still hold {mount}"
            time.sleep(0.01)  # the kernel reaps them: no event to wait on from here

    def signal_daemon(self, sig: int) -> None:
        """``sig`` to the daemon itself (pid 1 of its namespace: unshare passes no signal on)."""
        assert self.proc is not None
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        assert children, "the daemon under unshare is gone"
        os.kill(int(children[0]), sig)

    def stop(self) -> None:
        """A clean stop (SIGTERM): the daemon's own promise of a stop."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


@dataclass
class Ledger:
    """What was acknowledged: each item must be found exactly once after every cut."""

    #: (agent, workspace-relative file, line) of notes whose append returned
    notes: list[tuple[str, str, str]] = field(default_factory=list)
    #: (agent, sha) of commits the daemon reported in status
    commits: list[tuple[str, str]] = field(default_factory=list)
    #: memory id -> (agent, text expected, state expected: "valid" | "superseded" | "deleted")
    memories: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: checks of what an acknowledged report said (consolidation's RUN.json, cleanup's audit lines) against
    #: the store after the cut: each returns the problems found (a report saying more than the store holds)
    reports: list[Callable[[PowerCutRoot], list[str]]] = field(default_factory=list)


class PowerCutRoot:
    """A memstrata root on a :class:`LoopDisk`, a daemon on it, cuts, and the checks after each cut."""

    def __init__(
        self,
        workdir: Path,
        overrides: dict,
        agents: tuple[str, ...] = (),
        env: dict | None = None,
        size: str = IMAGE_SIZE,
    ) -> None:
        self.workdir = workdir
        self.disk = LoopDisk(workdir, size)
        self.overrides = overrides
        self.agents = agents
        self.env = {**os.environ, **(env or {})}
        self.ledger = Ledger()
        self.daemon: CutDaemon | None = None
        self.daemons = 0
        self.cut_took: list[float] = []

    @property
    def root(self) -> Path:
        return self.disk.mount / "root"

    @property
    def config(self) -> Path:
        return self.root / "memstrata.yaml"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def socket(self) -> Path:
        return self.workdir / "run" / "memstrata.sock"  # off the image: a socket is no data

    def workspace(self, agent: str) -> Path:
        return self.root / "workspace" if agent == "main" else self.root / "workspace" / "agents" / f"{agent}-workspace"

    def token(self, agent: str) -> str:
        return (self.workspace(agent) / ".memstrata" / "token").read_text().strip()

    def create(self) -> None:
        from tests.helpers import init_root, run_cli

        self.disk.create()
        (self.workdir / "run").mkdir(exist_ok=True)
        overrides = {**self.overrides, "paths": {**self.overrides.get("paths", {}), "socket": str(self.socket)}}
        init_root(self.root, **overrides)
        for agent in self.agents:
            run_cli("agent", "add", agent, config=self.config)
        data = yaml.safe_load(self.config.read_text())
        assert data["paths"]["socket"] == str(self.socket)
        seed_dictionary(self.state_dir)
        self.start()
        self.disk.sync()  # the root, its repositories and its store exist on the device before any cut

    def start(self) -> CutDaemon:
        self.daemons += 1
        log_path = self.workdir / f"daemon-{self.daemons}.log"
        self.daemon = CutDaemon(self.config, self.socket, self.state_dir, log_path, self.env).start()
        return self.daemon

    def cut(self, delay: float) -> CutDaemon:
        """``delay`` seconds after the last acknowledgement, the power goes; the next daemon starts on
        what the disk held (the checks are the caller's: :meth:`check`)."""
        assert self.daemon is not None
        time.sleep(delay)  # the point of the test: how long after the acknowledgement the cut comes
        self.daemon.kill(self.disk.mount)
        self.cut_took.append(self.disk.cut())
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        return self.start()

    def crash(self) -> CutDaemon:
        """SIGKILL of the daemon and all it started, then a new daemon on the same disk: no cut (what
        the page cache holds survives), the crash a power cut is the harder case of."""
        assert self.daemon is not None
        self.daemon.kill(self.disk.mount)
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        return self.start()

    def close(self) -> None:
        if self.daemon is not None:
            with contextlib.suppress(Exception):
                self.daemon.kill(self.disk.mount)
        self.disk.close()

    # -- the checks

    def check(self) -> list[str]:
        """Every acknowledged item exactly once, every repository fsck-clean: the problems found."""
        problems = self.fsck_all()
        problems += self.check_notes()
        problems += self.check_memories()
        for check in self.ledger.reports:
            problems += check(self)
        return problems

    def repositories(self) -> list[tuple[str, list[str]]]:
        """(name, git arguments) of every workspace repository and every history copy."""
        found = []
        for agent in ("main", *self.agents):
            found.append((f"workspace of {agent}", ["-C", str(self.workspace(agent))]))
        history = self.state_dir / "history"
        if history.is_dir():
            for copy in sorted(history.glob("*.git")):
                found.append((f"history copy {copy.name}", [f"--git-dir={copy}"]))
        return found

    def fsck_all(self) -> list[str]:
        problems = []
        for name, where in self.repositories():
            proc = _run("git", *where, "fsck", "--full", "--no-progress", check=False)
            if proc.returncode != 0:
                problems.append(f"git fsck of the {name}: exit {proc.returncode}: {proc.stderr.strip()[:500]}")
        return problems

    def check_notes(self) -> list[str]:
        problems = []
        for agent, rel, line in self.ledger.notes:
            path = self.workspace(agent) / rel
            text = path.read_text(errors="replace") if path.exists() else ""
            count = text.count(line)
            if count != 1:
                problems.append(f"note {line!r} of {agent} is in {rel} {count} times ({len(text)} bytes there)")
        for agent, sha in self.ledger.commits:
            where = str(self.workspace(agent))
            if _run("git", "-C", where, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode != 0:
                problems.append(f"commit {sha[:10]} of {agent}, reported made, is not in its workspace")
            elif _run("git", "-C", where, "merge-base", "--is-ancestor", sha, "HEAD", check=False).returncode != 0:
                problems.append(f"commit {sha[:10]} of {agent}, reported made, is not in HEAD's history")
        return problems

    def check_memories(self) -> list[str]:
        if not self.ledger.memories:
            return []
        assert self.daemon is not None
        problems = []
        by_agent: dict[str, list[tuple[str, str, str]]] = {}
        for memory_id, (agent, text, state) in self.ledger.memories.items():
            by_agent.setdefault(agent, []).append((memory_id, text, state))
        daemon = self.daemon
        try:
            wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=90, what="the store reachable")
        except AssertionError as exc:
            status = daemon.status()["conversation"]
            why = {k: v for k, v in status.items() if k in ("reachable", "error", "state", "queue", "replay")}
            return [f"{exc}: {json.dumps(why)[:1500]}"]
        for agent, expected in by_agent.items():
            with daemon.client(self.token(agent)) as client:
                listed = _all_memories(client, agent)
            for memory_id, text, state in expected:
                found = [m for m in listed if m["id"] == memory_id]
                same_text = [m for m in listed if m.get("memory") == text]
                if state == "deleted":
                    if found:
                        problems.append(f"memory {memory_id} of {agent}, acknowledged deleted, is back")
                    continue
                if len(found) != 1:
                    problems.append(f"memory {memory_id} of {agent} ({text!r}, {state}) found {len(found)} times")
                    continue
                memory = found[0]
                if memory.get("memory") != text:
                    problems.append(f"memory {memory_id} of {agent}: {memory.get('memory')!r}, acknowledged {text!r}")
                superseded = bool(memory.get("superseded_by") or memory.get("invalid_at"))
                if superseded != (state == "superseded"):
                    problems.append(f"memory {memory_id} of {agent}: {state} acknowledged, superseded: {superseded}")
                if len(same_text) != 1:
                    problems.append(f"text {text!r} of {agent} is stored {len(same_text)} times (ids {same_text})")
        return problems


def all_memories(rig: PowerCutRoot, agent: str) -> list[dict]:
    """Every memory of ``agent``'s as the daemon on the root lists it (superseded, archived ones too)."""
    assert rig.daemon is not None
    with rig.daemon.client(rig.token(agent)) as client:
        return _all_memories(client, agent)


def _all_memories(client: DaemonClient, agent: str) -> list[dict]:
    """Every memory of ``agent``'s, superseded, expired and archived ones included."""
    found: list[dict] = []
    cursor = None
    while True:
        page = client._request(  # the listing with every "show" flag: get_all names them one by one
            "GET",
            "/v1/memories",
            params={
                "agent": agent,
                "limit": 100,
                "show_superseded": True,
                "show_expired": True,
                "show_archived": True,
                **({"cursor": cursor} if cursor else {}),
            },
        )
        found += page["results"]
        cursor = page.get("next_cursor") or page.get("cursor")
        if not cursor:
            return found
