"""The hub's gate on the booted fleet, tried as an attacker holding spoke-1's key would (issue 47 item 6).

The fleet's remote is set up by ``memstrata fleet init-remote`` and ``memstrata fleet authorize`` (the
harness does it as an operator would).  With spoke-1's own key and ssh, over the fleet's network, to
the hub's real sshd: spoke-1 pushes its own ref fast-forward, and nothing else; it cannot rewind or
delete its own ref; it sees and fetches its own refs and the shared core only, not spoke-2's commit
even by its id; any ssh command but the two git ones is refused.  The hub writes the shared core
through the repository's path, which no key can.

One repository per host behind the one URL: the gate serves spoke-1 ``hosts/spoke-1.git``, where
spoke-2's objects never are.  The object attack (an empty-pack push of a ref of spoke-1's own at an
object id of spoke-2's, then a plain fetch of it: tests/system/empty_pack_push.py, run inside
spoke-1 over its ssh) finds nothing; the shared core reaches each host's repository (a host
authorized afterwards too), and the hub lists each host's refs (daemon/ops/fleet_hosts.py).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.system import operator
from tests.system.container import checkout_env
from tests.system.fleet import HUB, REMOTE, REMOTE_PATH, ROLES, address, ssh_command

pytestmark = pytest.mark.slow

SPOKE, OTHER = "spoke-1", "spoke-2"
OWN = "refs/memstrata/spoke-1/agent-c/daemon"
LOST = "refs/memstrata/spoke-1/agent-c/lost/kept"
THEIRS = "refs/memstrata/spoke-2/agent-d/daemon"
CORE = "refs/memstrata/shared/core"
WS = "/tmp/ws"
ATTACK = "/tmp/empty_pack_push.py"


def _repo(host: str | None) -> str:
    """A host's own repository on the hub (the top one for None)."""
    return f"{REMOTE_PATH}/hosts/{host}.git" if host else REMOTE_PATH


def _commit(fleet, role: str, text: str, amend: bool = False) -> str:
    fleet.sh(
        role,
        f"[ -d {WS} ] || git init -q {WS}; echo {text} > {WS}/note.md; git -C {WS} add -A; "
        f"git -C {WS} -c user.name={role} -c user.email={role}@fleet commit -q {'--amend' if amend else ''} -m {text}",
    )
    return fleet.run(role, "git", "-C", WS, "rev-parse", "HEAD").stdout.strip()


def _refs_on_hub(fleet, host: str | None = SPOKE) -> dict[str, str]:
    out = fleet.run(HUB, "git", "--git-dir", _repo(host), "for-each-ref", "--format=%(refname) %(objectname)").stdout
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
    assert _refs_on_hub(fleet, None) == {CORE: shas["core"]}  # the top: the hub's
    assert _refs_on_hub(fleet, OTHER) == {CORE: shas["core"], THEIRS: shas[OTHER]}
    assert _refs_on_hub(fleet, SPOKE) == {CORE: shas["core"], OWN: shas[SPOKE]}
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
    before = {host: _refs_on_hub(fleet, host) for host in (None, SPOKE, OTHER)}
    for ref in (THEIRS, "refs/memstrata/spoke-2/agent-c/x", CORE, "refs/memstrata/hub/agent-a/daemon", "refs/heads/x"):
        pushed = fleet.git(SPOKE, "-C", WS, "push", "--force", REMOTE, f"HEAD:{ref}", check=False)
        assert pushed.returncode != 0 and "[remote rejected]" in pushed.stderr, (ref, pushed.stderr)
    assert {host: _refs_on_hub(fleet, host) for host in (None, SPOKE, OTHER)} == before


def test_spoke_1_cannot_rewind_or_delete_its_own_ref(fleet, remote):
    before = _refs_on_hub(fleet)
    _commit(fleet, SPOKE, "rewritten", amend=True)
    forced = fleet.git(SPOKE, "-C", WS, "push", "--force", REMOTE, f"HEAD:{OWN}", check=False)
    assert forced.returncode != 0 and "not a fast-forward" in forced.stderr, forced.stderr
    deleted = fleet.git(SPOKE, "-C", WS, "push", REMOTE, f":{OWN}", check=False)
    assert deleted.returncode != 0 and "never deleted" in deleted.stderr, deleted.stderr
    assert _refs_on_hub(fleet) == before
    # every update of the remote's refs is in its reflog, and none of them rewound one
    log = fleet.run(HUB, "git", "--git-dir", _repo(SPOKE), "reflog", "show", "--format=%H", OWN).stdout.split()
    assert log and log[0] == before[OWN]
    ancestry = [f"git --git-dir {_repo(SPOKE)} merge-base --is-ancestor {a} {b}" for b, a in itertools.pairwise(log)]
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


def test_spoke_1_cannot_reach_spoke_2s_objects_by_their_ids(fleet, remote):
    """The object attack with spoke-1's key: a ref of its own at spoke-2's commit and at its blob
    (whose id anyone can compute from guessed content), sent with an empty pack, then fetched."""
    fleet.container(SPOKE).write(ATTACK, (Path(__file__).parent / "empty_pack_push.py").read_text(), 0o755)
    blob = fleet.run(OTHER, "git", "-C", WS, "rev-parse", f"{remote[OTHER]}:note.md").stdout.strip()
    stolen = "refs/memstrata/spoke-1/agent-c/stolen"
    ssh = [*ssh_command().split(), f"git@{address(HUB)}", f"git-receive-pack '{REMOTE_PATH}'"]
    for sha in (remote[OTHER], blob):
        tried = fleet.run(SPOKE, ATTACK, stolen, sha, "--", *ssh, check=False, timeout=60)
        assert tried.returncode == 1 and f"ng {stolen} missing necessary objects" in tried.stdout, tried
        fetched = fleet.git(SPOKE, "-C", WS, "fetch", REMOTE, stolen, check=False)
        assert fetched.returncode != 0 and "couldn't find remote ref" in fetched.stderr, fetched.stderr
        on_hub = fleet.run(HUB, "git", "--git-dir", _repo(SPOKE), "cat-file", "-e", sha, check=False)
        assert on_hub.returncode != 0  # the id names nothing in spoke-1's repository
    assert stolen not in _refs_on_hub(fleet, SPOKE)
    assert fleet.run(SPOKE, "git", "-C", WS, "cat-file", "-e", blob, check=False).returncode != 0


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
    assert _refs_on_hub(fleet, OTHER)[THEIRS] == after


def test_a_host_authorized_after_the_shared_core_gets_it_and_the_hub_lists_every_hosts_refs(fleet, remote):
    hub = fleet.container(HUB)
    hub.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "late", "-f", "/root/late-key")
    hub.run(operator.MEMSTRATA, "fleet", "authorize", "late-host", "/root/late-key.pub", env=checkout_env())
    core = _refs_on_hub(fleet, None)[CORE]
    assert _refs_on_hub(fleet, "late-host") == {CORE: core}
    python = str(Path(operator.MEMSTRATA).parent / "python")
    script = (
        "import json; from pathlib import Path; from daemon.ops import fleet_hosts; "
        f"print(json.dumps([[h.host, h.refs] for h in fleet_hosts.hosts(Path({REMOTE_PATH!r}))]))"
    )
    listed = json.loads(hub.run(python, "-c", script, env=checkout_env()).stdout)
    expected = [
        [h, {r: s for r, s in _refs_on_hub(fleet, h).items() if r != CORE}] for h in ("hub", "late-host", SPOKE, OTHER)
    ]
    assert listed == expected, listed
    assert listed[2][1][OWN] and listed[3][1][THEIRS]
