"""Three booted hosts as CI sees them: a hub and two spokes on a private network of their own.

Each host is a :class:`~tests.system.container.Container` booted from the cached Debian tree
(:mod:`tests.system.rootfs`), with two differences from a single test container:

- **Its own disk.**  The root is an overlay mounted on the test machine (the cached tree read-only
  below, ``<state>/<host>/upper`` above), not nspawn's tmpfs: whatever a host writes (its install,
  its workspaces, ``/var/lib/memstrata``, the hub's bare repository) is still there after
  :meth:`Fleet.kill` (a SIGKILL of the whole container, a power cut) and :meth:`Fleet.boot`.  A
  SIGKILL is not a lost page cache: what was written but not synced survives it too.
- **Its own network.**  No interface of the test machine takes part: the harness makes a network
  namespace per host and one for a switch (a bridge), joins each host to the switch with a veth
  pair, gives the host end its address on ``100.115.94.0/24`` (hub ``.1``, spokes ``.2``, ``.3``) and
  boots the container into that namespace (``--network-namespace-path``).  Those three addresses
  are all there is: no default route, nothing routes to the outside.  The addresses are the
  design's own (the hub is 100.115.94.1 on Tailscale): inside the range memstrata.service's
  ``IPAddressAllow=`` lets through, so the shipped unit reaches the hub as it would on Tailscale.
  (The test machine mounts cgroup v1, where systemd does not enforce ``IPAddressDeny=``: these
  tests cannot show the unit refusing another range.)  The namespaces outlive a killed container,
  so a host boots again with its address, and with its link as it was (a cut host stays cut until
  :meth:`Fleet.restore`).  ``--network-bridge`` would need the bridge in the test machine's own
  namespace and the addresses set again after every boot; neither machined nor networkd is needed
  this way.

The hub runs sshd (enabled in its root before its first boot, host keys of its own) for a ``git``
user whose shell is git-shell, and the fleet's bare repository, :data:`REMOTE_PATH`, set up as an
operator would: ``memstrata fleet init-remote`` (the repository, its update hook, the gate) and
``memstrata fleet authorize HOST KEY.pub`` for each host.  Every host has an ssh key of its own, made
here with ssh-keygen into its state directory and copied to :data:`KEY` inside; the hub's ``git``
user accepts each public key on a line of its own whose forced command is the gate naming that host
(so a key reaches its host's own repository, ``REMOTE_PATH/hosts/HOST.git``, behind the one URL: it
writes its host's refs only and reads those and the shared core), and every host knows the
hub's host key (``/etc/ssh/ssh_known_hosts``).  :meth:`Fleet.git` runs git inside a host with its own
key.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import subprocess
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.system import operator
from tests.system.container import Container, ContainerError, checkout_env

HUB = "hub"
SPOKES = ("spoke-1", "spoke-2")
ROLES = (HUB, *SPOKES)
SUBNET = "100.115.94"  # within Tailscale's 100.64.0.0/10, which memstrata.service allows
PREFIX = 24
IFACE = "eth0"  # each host's one interface, inside its namespace
REMOTE_PATH = "/srv/memstrata/fleet.git"
GIT_USER = "git"
KEY = "/etc/memstrata/fleet-key"  # this host's private key, root's alone
# the design's agents: A (and B) on the hub, C on one spoke, D on the other
AGENTS = {HUB: ("agent-a",), "spoke-1": ("agent-c",), "spoke-2": ("agent-d",)}
REMOTE = f"ssh://{GIT_USER}@{SUBNET}.1{REMOTE_PATH}"  # the hub's address: address(HUB)
SSH_TIMEOUT_S = 5  # ConnectTimeout of Fleet.git: a cut link fails within it, not at TCP's minutes

OWNER = "fleet-owner-pid"  # in the state dir: which test process mounted its roots

_serial = itertools.count()


def address(role: str) -> str:
    return f"{SUBNET}.{ROLES.index(role) + 1}"


def ssh_command(key: str = KEY) -> str:
    """GIT_SSH_COMMAND for a host's own key (and no other: IdentitiesOnly)."""
    return f"ssh -i {key} -o IdentitiesOnly=yes -o BatchMode=yes -o ConnectTimeout={SSH_TIMEOUT_S}"


@dataclass
class Host:
    role: str
    state: Path  # on the test machine: upper/ work/ root/ (the mounted overlay), its key, console.log
    netns: str
    container: Container

    @property
    def root(self) -> Path:
        return self.state / "root"


class Fleet:
    """``with Fleet(rootfs, state_dir) as fleet:`` boots hub and spokes; always powers off and cleans up."""

    def __init__(self, rootfs: Path, state_dir: Path):
        self.rootfs = rootfs
        self.state_dir = state_dir
        self.tag = f"msf-{os.getpid()}-{next(_serial)}"
        self.switch = f"{self.tag}-switch"
        self.hosts: dict[str, Host] = {}
        for role in ROLES:
            state = state_dir / role
            netns = f"{self.tag}-{role}"
            options = (f"--network-namespace-path=/run/netns/{netns}", f"--hostname={role}")
            # boots the overlay mounted at state/root, not the cached tree itself
            container = Container(state / "root", state / "console.log", name=f"{self.tag}-{role}", options=options)
            self.hosts[role] = Host(role, state, netns, container)

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Fleet:
        try:
            self.start()
        except BaseException:
            self.shutdown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def start(self) -> None:
        """Network, roots, keys; boot every host at once; then the hub's git over ssh."""
        _sweep_stale()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / OWNER).write_text(f"{os.getpid()}\n")
        self._network()
        for host in self.hosts.values():
            self._prepare_root(host)
        self._keys()
        for host in self.hosts.values():
            host.container.spawn()  # here, not in a pool thread (see Container.spawn)
        self._parallel(lambda host: host.container.wait_booted())
        self._hub_git()

    def boot(self, role: str) -> None:
        """Boot a host again (after :meth:`kill`): same root, same address, same key."""
        self.hosts[role].container.boot()

    def kill(self, role: str) -> None:
        """A power cut for one host: every process of it SIGKILLed at once, its disk as it was."""
        self.hosts[role].container.kill()

    def shutdown(self) -> None:
        """Power every host off, unmount the roots, remove the namespaces: whatever state start() reached."""
        errors: list[str] = []

        def off(host: Host) -> None:
            try:
                host.container.shutdown()
            except Exception as error:  # go on cleaning up; said below
                errors.append(f"{host.role}: {error}")
                with contextlib.suppress(Exception):
                    host.container.kill()

        self._parallel(off)
        for host in self.hosts.values():
            if os.path.ismount(host.root):
                proc = subprocess.run(["umount", str(host.root)], capture_output=True, text=True)
                if proc.returncode != 0:
                    subprocess.run(["umount", "--lazy", str(host.root)], capture_output=True)
                    errors.append(f"umount {host.root}: {proc.stderr.strip()}")
        for netns in [*(h.netns for h in self.hosts.values()), self.switch]:
            _ip("netns", "delete", netns, check=False)
        if errors:
            raise ContainerError("fleet shutdown: " + "; ".join(errors))

    # ------------------------------------------------------------ operations

    def run(self, role: str, *argv: str, **kwargs) -> subprocess.CompletedProcess:
        return self.hosts[role].container.run(*argv, **kwargs)

    def sh(self, role: str, script: str, **kwargs) -> subprocess.CompletedProcess:
        return self.hosts[role].container.sh(script, **kwargs)

    def each(self, step: Callable[[str], object], roles: tuple[str, ...] | None = None) -> None:
        """``step(role)`` for every host (or ``roles``) at once, in threads; the first failure is raised."""
        chosen = [self.hosts[role] for role in (roles or tuple(self.hosts))]
        with ThreadPoolExecutor(len(chosen) or 1) as pool:
            for future in [pool.submit(step, host.role) for host in chosen]:
                future.result()

    def container(self, role: str) -> Container:
        return self.hosts[role].container

    def git(self, role: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """``git ARGS`` inside ``role`` as root, over ssh with that host's own key."""
        return self.run(role, "git", *args, env={"GIT_SSH_COMMAND": ssh_command()}, **kwargs)

    def install(self, role: str, agents: tuple[str, ...] | None = None) -> None:
        """``memstrata install`` as an operator runs it, ``agent add`` for each agent (default
        :data:`AGENTS`), then the service started (install does not start it); returns once systemd
        has it running (Type=notify).  Enabled, so it comes back by itself when the host boots again."""
        c = self.container(role)
        operator.install(c)
        for agent in AGENTS.get(role, ()) if agents is None else agents:
            operator.memstrata(c, "agent", "add", agent)
        operator.systemctl(c, "start", timeout=240)

    def cut(self, role: str) -> None:
        """The host's link down (from inside: its one interface): nothing reaches it, it reaches nothing."""
        self.run(role, "ip", "link", "set", IFACE, "down")

    def restore(self, role: str) -> None:
        self.run(role, "ip", "link", "set", IFACE, "up")

    # ------------------------------------------------------------ setup

    def _network(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for host in self.hosts.values():
            _ip("netns", "add", host.netns)
            # the switch's port is named after the host; the host's end is its eth0
            _ip("-n", self.switch, "link", "add", host.role, "type", "veth", "peer", "name", IFACE, "netns", host.netns)
            _ip("-n", self.switch, "link", "set", host.role, "master", "br0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
            _ip("-n", host.netns, "address", "add", f"{address(host.role)}/{PREFIX}", "dev", IFACE)
            _ip("-n", host.netns, "link", "set", IFACE, "up")

    def _prepare_root(self, host: Host) -> None:
        for part in ("upper", "work", "root"):
            (host.state / part).mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={self.rootfs},upperdir={host.state / 'upper'},workdir={host.state / 'work'}"
        _check(["mount", "-t", "overlay", "overlay", "-o", options, str(host.root)])
        root = host.root
        (root / "etc" / "hostname").write_text(host.role + "\n")
        (root / "etc" / "machine-id").write_text(uuid.uuid4().hex + "\n")  # the tree's would be every host's
        hosts = "".join(f"{address(role)}\t{role}\n" for role in ROLES)
        (root / "etc" / "hosts").write_text(f"127.0.0.1\tlocalhost\n{hosts}")
        # host keys of its own (the cached tree's would be every host's), sshd started at boot on the hub
        for old in (root / "etc" / "ssh").glob("ssh_host_*"):
            old.unlink()
        _check(["ssh-keygen", "-q", "-A", "-f", str(root)])
        if host.role == HUB:
            _check(["systemctl", f"--root={root}", "--quiet", "enable", "ssh.service"])
            (root / "etc" / "ssh" / "sshd_config.d" / "fleet.conf").write_text(
                "# keys only: the fleet's hosts log in as git with a key each\nPasswordAuthentication no\n"
            )

    def _keys(self) -> None:
        """A key per host (made on the test machine, into its state), the hub's host key known to all."""
        hub_key = (self.hosts[HUB].root / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        known = f"{HUB},{address(HUB)} {hub_key[0]} {hub_key[1]}\n"
        for host in self.hosts.values():
            key = host.state / "fleet-key"
            if not key.exists():
                _check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.role, "-f", str(key)])
            inside = host.root / KEY.lstrip("/")
            inside.parent.mkdir(parents=True, exist_ok=True)
            inside.write_bytes(key.read_bytes())
            inside.chmod(0o600)
            (inside.parent / (inside.name + ".pub")).write_bytes((host.state / "fleet-key.pub").read_bytes())
            (host.root / "etc" / "ssh" / "ssh_known_hosts").write_text(known)

    def _hub_git(self) -> None:
        """The fleet's remote as an operator sets it up: a ``git`` user (git-shell: no login), then
        ``memstrata fleet init-remote`` (the bare repository, its hook, the gate) and ``memstrata fleet
        authorize`` for every host's key (the gate as its forced command, naming the host)."""
        self.sh(
            HUB,
            f"""
            useradd --create-home --home-dir /home/{GIT_USER} --shell /usr/bin/git-shell {GIT_USER}
            usermod -p '*' {GIT_USER}  # no password, not locked ('!' would refuse key logins too)
            """,
        )
        hub = self.container(HUB)
        env = checkout_env()
        hub.run(operator.MEMSTRATA, "fleet", "init-remote", REMOTE_PATH, "--user", GIT_USER, env=env, timeout=120)
        for host in self.hosts.values():
            pub = f"/root/{host.role}-fleet-key.pub"
            hub.write(pub, (host.state / "fleet-key.pub").read_text())
            hub.run(operator.MEMSTRATA, "fleet", "authorize", host.role, pub, "--user", GIT_USER, env=env, timeout=120)

    def _parallel(self, step) -> None:
        with ThreadPoolExecutor(len(self.hosts) or 1) as pool:
            for future in [pool.submit(step, host) for host in self.hosts.values()]:
                future.result()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _check(["ip", *args], check=check)


def _check(command: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ContainerError(f"{shlex.join(command)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _sweep_stale() -> None:
    """What a killed test run left (its nspawns power off with it, nothing else goes): its namespaces
    (``msf-<pid>-…``) and its hosts' mounted roots (the state dir's :data:`OWNER`), when that pid is gone."""
    for name in _ip("netns", "list", check=False).stdout.split():
        parts = name.split("-")
        if len(parts) > 2 and parts[0] == "msf" and parts[1].isdigit() and not Path(f"/proc/{parts[1]}").exists():
            _ip("netns", "delete", name, check=False)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ")
        if len(fields) != 2 or not fields[1].startswith("overlay "):
            continue
        target = Path(line.split()[4])
        owner = target.parent.parent / OWNER  # <state_dir>/<role>/root
        if target.name == "root" and owner.exists():
            pid = owner.read_text().strip()
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                subprocess.run(["umount", "--lazy", str(target)], capture_output=True)
