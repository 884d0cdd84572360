"""The hub's gate on the booted fleet, tried as an attacker holding spoke-1's key would (issue 47 item 6).

The fleet's remote is set up by ``memstrata fleet init-remote`` and ``memstrata fleet authorize`` (the
harness does it as an operator would).  With spoke-1's own key and ssh, over the fleet's network, to
the hub's real sshd: spoke-1 pushes its own ref fast-forward, and nothing else; it cannot rewind or
delete its own ref; it sees and fetches its own refs and the shared core only, not spoke-2's commit
even by its id; any ssh command but the two git ones is refused.  The hub writes the shared core
through the repository's path, which no key can.
"""

from __future__ import annotations

import itertools

import pytest

from tests.system.fleet import HUB, REMOTE, REMOTE_PATH, ROLES, address, ssh_command

pytestmark = pytest.mark.slow

SPOKE, OTHER = "spoke-1", "spoke-2"
OWN = "refs/memstrata/spoke-1/agent-c/daemon"
LOST = "refs/memstrata/spoke-1/agent-c/lost/kept"
THEIRS = "refs/memstrata/spoke-2/agent-d/daemon"
CORE = "refs/memstrata/shared/core"
WS = "/tmp/ws"


def _commit(fleet, role: str, text: str, amend: bool = False) -> str:
    fleet.sh(
        role,
        f"[ -d {WS} ] || git init -q {WS}; echo {text} > {WS}/note.md; git -C {WS} add -A; "
        f"git -C {WS} -c user.name={role} -c user.email={role}@fleet commit -q {'--amend' if amend else ''} -m {text}",
    )
    return fleet.run(role, "git", "-C", WS, "rev-parse", "HEAD").stdout.strip()


def _refs_on_hub(fleet) -> dict[str, str]:
    out = fleet.run(HUB, "git", "--git-dir", REMOTE_PATH, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return dict(line.split() for line in out.splitlines())


def _ssh(fleet, role: str, *command: str):
    """ssh to the hub's git user with ``role``'s own key, asking for ``command``."""
    return fleet.run(role, *ssh_command().split(), f"git@{address(HUB)}", *command, check=False, timeout=60)


@pytest.fixture(scope="module")
def remote(fleet):
    """The shared core written by the hub through the path, spoke-2's and spoke-1's first pushes."""
    shas = {"core": _commit(fleet, HUB, "core")}
    fleet.run(HUB, "git", "-C", WS, "push", "-q", REMOTE_PATH, f"HEAD:{CORE}")  # root's git, the plain path
    shas[OTHER] = _commit(fleet, OTHER, "spoke-2-secret")
    fleet.git(OTHER, "-C", WS, "push", "-q", REMOTE, f"HEAD:{THEIRS}")
    shas[SPOKE] = _commit(fleet, SPOKE, "first")
    fleet.git(SPOKE, "-C", WS, "push", "-q", REMOTE, f"HEAD:{OWN}")
    assert _refs_on_hub(fleet) == {CORE: shas["core"], THEIRS: shas[OTHER], OWN: shas[SPOKE]}
    return shas


def test_every_hosts_key_reaches_the_gate_only(fleet):
    lines = fleet.run(HUB, "cat", "/home/git/.ssh/authorized_keys").stdout.splitlines()
    assert sorted(line.rsplit(" ", 1)[1] for line in lines) == [f"memstrata:{role}" for role in ROLES]
    for line in lines:
        host = line.rsplit(":", 1)[1]
        assert line.startswith(f'command="memstrata-fleet-gate {host}",restrict ssh-ed25519 '), line
    shown = fleet.run(HUB, "stat", "-c", "%U %a", "/home/git/.ssh/authorized_keys").stdout.split()
    assert shown == ["git", "600"]


def test_spoke_1_pushes_its_own_ref_fast_forward(fleet, remote):
    second = _commit(fleet, SPOKE, "second")
    fleet.git(SPOKE, "-C", WS, "push", "-q", REMOTE, f"HEAD:{OWN}")
    fleet.git(SPOKE, "-C", WS, "push", "-q", REMOTE, f"HEAD:{LOST}")
    refs = _refs_on_hub(fleet)
    assert refs[OWN] == second and refs[LOST] == second


def test_spoke_1_cannot_write_another_hosts_refs_the_shared_core_or_a_branch(fleet, remote):
    before = _refs_on_hub(fleet)
    for ref in (THEIRS, "refs/memstrata/spoke-2/agent-c/x", CORE, "refs/memstrata/hub/agent-a/daemon", "refs/heads/x"):
        pushed = fleet.git(SPOKE, "-C", WS, "push", "--force", REMOTE, f"HEAD:{ref}", check=False)
        assert pushed.returncode != 0 and "[remote rejected]" in pushed.stderr, (ref, pushed.stderr)
    assert _refs_on_hub(fleet) == before


def test_spoke_1_cannot_rewind_or_delete_its_own_ref(fleet, remote):
    before = _refs_on_hub(fleet)
    _commit(fleet, SPOKE, "rewritten", amend=True)
    forced = fleet.git(SPOKE, "-C", WS, "push", "--force", REMOTE, f"HEAD:{OWN}", check=False)
    assert forced.returncode != 0 and "not a fast-forward" in forced.stderr, forced.stderr
    deleted = fleet.git(SPOKE, "-C", WS, "push", REMOTE, f":{OWN}", check=False)
    assert deleted.returncode != 0 and "never deleted" in deleted.stderr, deleted.stderr
    assert _refs_on_hub(fleet) == before
    # every update of the remote's refs is in its reflog, and none of them rewound one
    log = fleet.run(HUB, "git", "--git-dir", REMOTE_PATH, "reflog", "show", "--format=%H", OWN).stdout.split()
    assert log and log[0] == before[OWN]
    ancestry = [f"git --git-dir {REMOTE_PATH} merge-base --is-ancestor {a} {b}" for b, a in itertools.pairwise(log)]
    fleet.sh(HUB, " && ".join(ancestry) or "true")


def test_spoke_1_sees_and_fetches_its_own_refs_and_the_shared_core_only(fleet, remote):
    names = set(fleet.git(SPOKE, "ls-remote", REMOTE).stdout.split()[1::2])
    assert {CORE, OWN} <= names <= {CORE, OWN, LOST}, names
    fleet.git(SPOKE, "-C", WS, "fetch", "-q", REMOTE, CORE)
    assert fleet.run(SPOKE, "git", "-C", WS, "rev-parse", "FETCH_HEAD").stdout.strip() == remote["core"]
    for version in ("0", "2"):
        for theirs in (remote[OTHER], THEIRS):  # by id, by name
            asked = fleet.git(
                SPOKE, "-C", WS, "-c", f"protocol.version={version}", "fetch", REMOTE, theirs, check=False
            )
            assert asked.returncode != 0, (version, theirs, asked.stderr)
    assert fleet.run(SPOKE, "git", "-C", WS, "cat-file", "-e", remote[OTHER], check=False).returncode != 0


def test_any_other_ssh_command_is_refused(fleet, remote):
    for command in (
        ("ls",),
        ("sh", "-c", "id"),
        ("git-upload-pack '/etc'",),
        (f"git-receive-pack '{REMOTE_PATH}'; touch /tmp/pwned",),
        (f"git-upload-pack '{REMOTE_PATH}' `touch /tmp/pwned`",),
        (f"git-upload-archive '{REMOTE_PATH}'",),
    ):
        refused = _ssh(fleet, SPOKE, *command)
        assert refused.returncode != 0 and "memstrata fleet gate: refused" in refused.stderr, (command, refused)
    login = fleet.run(SPOKE, *ssh_command().split(), "-T", f"git@{address(HUB)}", check=False)  # no command
    assert login.returncode != 0 and "interactive login" in login.stderr, login.stderr
    tunnel = fleet.run(SPOKE, *ssh_command().split(), "-W", "127.0.0.1:22", f"git@{address(HUB)}", check=False)
    assert tunnel.returncode != 0, tunnel  # restrict: no forwarding
    assert fleet.run(HUB, "test", "-e", "/tmp/pwned", check=False).returncode != 0


def test_the_hub_writes_the_shared_core_through_the_path_and_the_spokes_read_it(fleet, remote):
    core = _commit(fleet, HUB, "core-2")
    fleet.run(HUB, "git", "-C", WS, "push", "-q", REMOTE_PATH, f"HEAD:{CORE}")
    for spoke in (SPOKE, OTHER):
        fleet.git(spoke, "-C", WS, "fetch", "-q", REMOTE, CORE)
        assert fleet.run(spoke, "git", "-C", WS, "rev-parse", "FETCH_HEAD").stdout.strip() == core
    # and a spoke's push after the hub's (objects in directories root made) still goes through
    after = _commit(fleet, OTHER, "spoke-2-after-the-core")
    fleet.git(OTHER, "-C", WS, "push", "-q", REMOTE, f"HEAD:{THEIRS}")
    assert _refs_on_hub(fleet)[THEIRS] == after
