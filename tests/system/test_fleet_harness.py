"""The fleet harness itself (tests/system/fleet.py), proved once so every fleet test can lean on it.

One fleet for the module (booted once, shared; the tests run in file order and the last one
kills a host): hub, spoke-1 and spoke-2 each boot with their own name and address and nothing
else on their network; `memstrata install` and an agent on each, the service running under
each host's systemd; each spoke pushes and fetches the hub's bare repository over ssh with its
own key (and a key the hub never saw is refused); a cut spoke reaches nothing until its link
is restored; a spoke SIGKILLed whole boots again with its disk as it was and memstrata up.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.system import operator
from tests.system.container import ContainerError
from tests.system.fleet import (
    AGENTS,
    HUB,
    IFACE,
    PREFIX,
    REMOTE,
    REMOTE_PATH,
    ROLES,
    SPOKES,
    SUBNET,
    address,
    ssh_command,
)
from tests.system.operator import poll

pytestmark = pytest.mark.slow
AGENT = {role: agents[0] for role, agents in AGENTS.items()}  # what Fleet.install adds by default


@pytest.fixture(scope="module")
def installed(fleet):
    """Every host after `memstrata install`, its agent added and memstrata.service started."""
    fleet.each(fleet.install)
    return fleet


def _agents(fleet, role: str) -> set[str]:
    return {agent["id"] for agent in operator.status(fleet.container(role))["agents"]}


def test_each_host_has_its_name_and_an_address_on_the_fleet_network_only(fleet):
    for role in ROLES:
        assert fleet.run(role, "hostname").stdout.strip() == role
        shown = fleet.run(role, "ip", "-4", "-o", "address", "show").stdout
        assert f"inet {address(role)}/{PREFIX}" in shown, shown
        routes = fleet.run(role, "ip", "-4", "route").stdout.splitlines()
        # the subnet's own route and nothing else: no default route, nothing leaves the fleet
        assert [r.split()[:3] for r in routes] == [[f"{SUBNET}.0/{PREFIX}", "dev", IFACE]], routes


def test_each_host_runs_memstrata_under_its_systemd_with_its_agent(installed):
    for role in ROLES:
        c = installed.container(role)
        shown = c.show("memstrata.service", "ActiveState", "SubState", "NRestarts")
        assert (shown["ActiveState"], shown["SubState"], shown["NRestarts"]) == ("active", "running", "0"), shown
        assert poll(lambda role=role: AGENT[role] in _agents(installed, role), 90, f"{role} serving {AGENT[role]}")


def test_spokes_push_and_fetch_the_hubs_repository_with_their_own_keys(installed):
    f = installed
    heads = {}
    for spoke in SPOKES:
        f.sh(
            spoke,
            f"rm -rf /tmp/probe && git init -q /tmp/probe && "
            f"git -C /tmp/probe -c user.name={spoke} -c user.email={spoke}@fleet commit -q --allow-empty -m {spoke}",
        )
        heads[spoke] = f.run(spoke, "git", "-C", "/tmp/probe", "rev-parse", "HEAD").stdout.strip()
        f.git(spoke, "-C", "/tmp/probe", "push", "-q", REMOTE, f"HEAD:refs/memstrata/{spoke}/probe")
    for spoke, head in heads.items():  # each into its own repository behind the one URL
        on_hub = f.run(HUB, "git", "--git-dir", f"{REMOTE_PATH}/hosts/{spoke}.git", "show-ref").stdout
        assert f"{head} refs/memstrata/{spoke}/probe" in on_hub, on_hub
    # each fetches what it pushed (and only that: test_fleet_gate.py tries the rest)
    for spoke, head in heads.items():
        f.git(spoke, "-C", "/tmp/probe", "fetch", "-q", REMOTE, f"refs/memstrata/{spoke}/probe")
        assert f.run(spoke, "git", "-C", "/tmp/probe", "rev-parse", "FETCH_HEAD").stdout.strip() == head
    # the hub's sshd saw each spoke come with its own key, from its own address
    journal = f.run(HUB, "journalctl", "--no-pager", "-o", "cat", "-u", "ssh.service").stdout
    for spoke in SPOKES:
        pub = (f.hosts[spoke].state / "fleet-key.pub").read_text().split()
        fingerprint = subprocess.run(
            ["ssh-keygen", "-l", "-f", "-"], input=" ".join(pub), capture_output=True, text=True, check=True
        ).stdout.split()[1]
        assert f"Accepted publickey for git from {address(spoke)} port" in journal, journal
        assert any(address(spoke) in line and fingerprint in line for line in journal.splitlines()), journal
    # a key the hub was never given gets nothing
    f.sh("spoke-1", "rm -f /tmp/stranger* && ssh-keygen -q -t ed25519 -N '' -f /tmp/stranger")
    stranger = {"GIT_SSH_COMMAND": ssh_command("/tmp/stranger")}
    refused = f.run("spoke-1", "git", "ls-remote", REMOTE, env=stranger, check=False)
    assert refused.returncode != 0 and "Permission denied (publickey)" in refused.stderr, refused.stderr


def test_a_cut_spoke_reaches_nothing_until_its_link_is_restored(installed):
    f = installed
    # from the hub, spoke-1 answers (a refused connection: no sshd on a spoke) while its link is up
    knock = f"timeout 5 bash -c '</dev/tcp/{address('spoke-1')}/22'"
    assert "Connection refused" in f.run(HUB, "bash", "-c", knock, check=False).stderr
    f.cut("spoke-1")
    try:
        cut = f.git("spoke-1", "ls-remote", REMOTE, check=False, timeout=60)
        assert cut.returncode != 0 and f"{address(HUB)} port 22" in cut.stderr, cut.stderr
        assert f.git("spoke-2", "ls-remote", REMOTE).returncode == 0  # the other spoke's link is its own
        knocked = f.run(HUB, "bash", "-c", knock, check=False)  # nothing answers now (no route, or the timeout)
        assert knocked.returncode != 0 and "Connection refused" not in knocked.stderr, knocked.stderr
    finally:
        f.restore("spoke-1")
    poll(lambda: f.git("spoke-1", "ls-remote", REMOTE, check=False).returncode == 0, 60, "spoke-1 back on the hub")


def test_a_killed_spoke_boots_again_with_its_disk_and_memstrata(installed):
    f = installed
    c = f.container("spoke-2")
    workspace = f"{operator.AGENTS}/{AGENT['spoke-2']}-workspace"
    f.sh("spoke-2", f"echo kept > /var/lib/memstrata/canary && echo kept > {workspace}/canary.txt")
    leader = c.leader
    f.kill("spoke-2")
    with pytest.raises(ContainerError):
        c.run("true")  # no container to enter
    assert leader is not None and not _alive(leader)
    f.boot("spoke-2")
    assert f.run("spoke-2", "cat", "/var/lib/memstrata/canary", f"{workspace}/canary.txt").stdout == "kept\nkept\n"
    # enabled at install, so started by the boot itself, serving the same agent
    poll(
        lambda: c.run("systemctl", "is-active", "memstrata.service", check=False).stdout.strip() == "active",
        120,
        "memstrata.service active after the boot",
    )
    assert poll(lambda: AGENT["spoke-2"] in _agents(f, "spoke-2"), 90, "agent-d served again")
    assert f.run("spoke-2", "hostname").stdout.strip() == "spoke-2"
    assert f.git("spoke-2", "ls-remote", REMOTE).returncode == 0  # its address and its key came back with it


def _alive(pid: int) -> bool:
    """A process that has not exited (a zombie waiting for its reaper has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
