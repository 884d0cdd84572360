"""Boot the cached Debian tree under a real systemd (systemd-nspawn) and run commands inside it.

The container boots with ``-b --register=no --keep-unit`` (the machine running the tests
need not have a system bus or machined) and, unless the caller gives other ``options``,
``--private-network`` (loopback only: nothing leaves it) and ``--volatile=overlay`` (a
tmpfs over the read-only cached tree, so every boot starts from the same fresh system and
leaves nothing behind); a fleet host (:mod:`tests.system.fleet`) boots instead on a network
namespace of its own and a root that outlives a power cut.  This checkout, its
virtualenv and the python the virtualenv links to are bound in read-only at their own
absolute paths, so the paths ``memstrata install`` writes work inside as they would on
the host.

Commands run inside through ``nsenter`` into the container's PID 1 namespaces
(``systemd-run --machine`` needs registration), with a clean environment.  A container
that does not boot fails the test with nspawn's own output; it is never skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import REPO_ROOT

BOOT_TIMEOUT_S = 90
# a single booted host: loopback only, a fresh tmpfs over the cached tree at every boot
ISOLATED = ("--private-network", "--volatile=overlay")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ContainerError(AssertionError):
    """The container did not boot, or a command inside failed; the message says why."""


def _resolved(path: Path) -> Path:
    return path.resolve()


def checkout_binds() -> list[Path]:
    """Host paths the checkout's virtualenv needs, each to be bound at the same path inside.

    The checkout itself, the virtualenv when it is a symlink to elsewhere, and the
    installation the virtualenv's python links to (``pyvenv.cfg`` ``home``) unless that is
    the system's ``/usr`` (the tree's own python3 is then the same Debian build).
    """
    binds = [REPO_ROOT]
    venv = _resolved(REPO_ROOT / ".venv")
    if not venv.is_relative_to(REPO_ROOT):
        binds.append(venv)
    base = _venv_base_prefix(venv)
    if base != Path("/usr"):
        binds.append(base)
    return binds


def _venv_base_prefix(venv: Path) -> Path:
    """The installation a virtualenv's python belongs to: ``home`` in pyvenv.cfg is its bin/."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return _resolved(Path(value.strip())).parent
    return _resolved(Path(sys.base_prefix))


@functools.cache
def checkout_env() -> dict[str, str]:
    """Environment that makes the virtualenv import this checkout's code.

    A worktree sharing another checkout's virtualenv has an editable install that points
    at the other checkout; PYTHONPATH puts this one first (as the tests' cwd does on the
    host).  Empty when the virtualenv is this checkout's own, as in CI.  The probe runs without the
    tests' own PYTHONPATH (which would always find this checkout): the container has none.
    """
    probe = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "python"), "-c", "import daemon; print(daemon.__file__)"],
        cwd="/",
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if probe.returncode == 0 and Path(probe.stdout.strip()).resolve().is_relative_to(REPO_ROOT):
        return {}
    return {"PYTHONPATH": str(REPO_ROOT)}


class Container:
    """One booted systemd; ``with Container(...) as c:`` boots it and always shuts it down."""

    def __init__(
        self,
        rootfs: Path,
        log: Path,
        binds_ro: list[Path] | None = None,
        name: str = "memstrata-test",
        options: tuple[str, ...] = ISOLATED,
    ):
        self.rootfs = rootfs
        self.log = log
        self.binds_ro = checkout_binds() if binds_ro is None else binds_ro
        self.name = name
        self.options = options
        self.proc: subprocess.Popen | None = None
        self.leader: int | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Container:
        self.boot()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def boot(self) -> None:
        self.spawn()
        self.wait_booted()

    def spawn(self) -> None:
        """Start nspawn, not waiting for the boot.  From the thread that outlives the container (the
        main one): nspawn's parent-death signal follows the thread that started it, so nspawn started
        from a pool thread powers off when that thread ends."""
        for tool in ("systemd-nspawn", "nsenter"):
            if not shutil.which(tool):
                raise ContainerError(f"{tool} missing: `make system-deps` installs systemd-container")
        command = [
            "systemd-nspawn",
            "--boot",
            "--register=no",
            "--keep-unit",
            *self.options,
            "--console=read-only",
            f"--machine={self.name}",
            f"--directory={self.rootfs}",
            *(f"--bind-ro={path}" for path in self.binds_ro),
        ]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.leader = None
        with open(self.log, "ab") as out:  # a host booted again keeps its earlier boots' console above
            out.write((shlex.join(command) + "\n").encode())
            out.flush()
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
            )

    def wait_booted(self) -> None:
        """Until systemd inside has booted (any thread); a boot that fails powers the container off."""
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        try:
            self.leader = self._wait_for_leader(deadline)
            state = self._wait_until_booted(deadline)
        except BaseException:
            self.shutdown()
            raise
        if state not in ("running", "degraded"):
            failed = self.run("systemctl", "--failed", "--no-pager", check=False).stdout
            self.shutdown()
            raise ContainerError(f"systemd did not boot ({state}):\n{failed}\n{self.output()}")

    def _wait_for_leader(self, deadline: float) -> int:
        """PID (host view) of the container's systemd: nspawn's child once it has exec'd systemd."""
        assert self.proc
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ContainerError(f"systemd-nspawn exited with {self.proc.returncode}:\n{self.output()}")
            for child in _children(self.proc.pid):
                try:
                    if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                        return child
                except OSError:
                    continue
            time.sleep(0.05)
        raise ContainerError(f"no systemd in the container after {BOOT_TIMEOUT_S} s:\n{self.output()}")

    def _wait_until_booted(self, deadline: float) -> str:
        state = ""
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise ContainerError(f"systemd-nspawn exited with {self.proc.returncode}:\n{self.output()}")
            remaining = max(1.0, deadline - time.monotonic())
            try:
                proc = self.run("systemctl", "is-system-running", "--wait", check=False, timeout=remaining)
            except subprocess.TimeoutExpired:
                break
            state = proc.stdout.strip()
            if state in ("running", "degraded", "maintenance", "stopping"):
                return state
            time.sleep(0.2)  # the bus may not be up yet ("offline", "unknown")
        raise ContainerError(f"the container did not finish booting in {BOOT_TIMEOUT_S} s ({state}):\n{self.output()}")

    def shutdown(self, timeout: float = 30) -> None:
        """Power the container off (SIGTERM to nspawn halts it cleanly); SIGKILL when it hangs."""
        if not self.proc or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.leader = None

    def kill(self) -> None:
        """A power cut: SIGKILL the container's PID 1 (the kernel then kills every process of its PID
        namespace at once, nothing shuts down) and nspawn with it.  The root stays as the kill left it."""
        if not self.proc or self.proc.poll() is not None:
            return
        if self.leader is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.leader, signal.SIGKILL)
        self.proc.kill()
        self.proc.wait(30)
        if self.leader is not None:
            _wait_gone(self.leader, 30)
        self.leader = None

    def output(self) -> str:
        """nspawn's output and the container's console so far."""
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    # ------------------------------------------------------------ inside

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 120,
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` inside (all the container's namespaces, its root, a clean environment)."""
        if self.leader is None:
            raise ContainerError("the container is not booted")
        base = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb", "SYSTEMD_PAGER": ""}
        environment = [f"{k}={v}" for k, v in {**base, **(env or {})}.items()]
        command = ["nsenter", "-t", str(self.leader), "-a", "--", "/usr/bin/env", "-i", *environment, *argv]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, input=input)
        if check and proc.returncode != 0:
            raise ContainerError(
                f"inside the container: {shlex.join(argv)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def sh(self, script: str, **kwargs) -> subprocess.CompletedProcess:
        """Run a shell script inside (``set -e``)."""
        return self.run("/bin/sh", "-ec", script, **kwargs)

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        """Create ``path`` inside with ``text`` (parents made), owned by root."""
        self.run("/bin/sh", "-ec", f'mkdir -p "$(dirname {shlex.quote(path)})"; cat > {shlex.quote(path)}', input=text)
        self.run("chmod", f"{mode:o}", path)

    def read(self, path: str) -> str:
        return self.run("cat", path).stdout

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """``systemctl show -p …`` as a dict."""
        out = self.run("systemctl", "show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str | None = None, lines: int = 200) -> str:
        args = ["journalctl", "--no-pager", "-o", "short-precise", "-n", str(lines)]
        if unit:
            args += ["-u", unit]
        return self.run(*args, check=False).stdout


def _die_with_parent() -> None:
    """In nspawn's process: SIGTERM (a clean poweroff) when the test run dies without shutting it down."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _wait_gone(pid: int, timeout: float) -> None:
    """Until ``pid`` has exited (a zombie counts: whoever is its parent now reaps it in its own time)."""
    deadline = time.monotonic() + timeout
    while _state(pid) not in ("", "Z", "X"):
        if time.monotonic() > deadline:
            raise ContainerError(f"the container's PID 1 ({pid}) was still there {timeout} s after SIGKILL")
        time.sleep(0.05)


def _state(pid: int) -> str:
    """The process's state letter (R, S, Z, ...); empty when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
