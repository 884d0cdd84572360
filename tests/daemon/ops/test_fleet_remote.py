"""The fleet's remote on a plain path: ``memstrata fleet init-remote`` and ``authorize`` as real
subprocesses, the installed gate run as sshd would run it (``SSH_ORIGINAL_COMMAND`` set, a git client
behind it through a stand-in ssh), the update hook with and without ``MEMSTRATA_FLEET_HOST``, one
repository per host behind the one URL (the object attack by hand, tests/system/empty_pack_push.py),
the shared core copied into each, and the hub's reading of them (daemon/ops/fleet_hosts.py).

The stand-in ssh is what sshd does for a forced command, minus the network: it hands the client's
request to the gate in ``SSH_ORIGINAL_COMMAND`` and passes ``GIT_PROTOCOL`` on (an sshd with
``AcceptEnv GIT_PROTOCOL``, the worst case).  The same user runs both sides here; the booted fleet
(tests/system/test_fleet_gate.py) runs the gate as the hub's ``git`` user behind a real sshd.
"""

from __future__ import annotations

import getpass
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from daemon.ops import fleet_gate, fleet_hosts, fleet_remote, posix_acl
from protocol.vocabulary import AGENT_ID_PATTERN
from tests.helpers import run_cli

USER = getpass.getuser()
ZERO = "0" * 40
CORE = "refs/memstrata/shared/core"
ATTACK = Path(__file__).parents[2] / "system" / "empty_pack_push.py"


class Remote:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.path = tmp / "srv" / "fleet.git"
        self.gate = tmp / "lib" / "fleet-gate"
        self.url = f"ssh://hub{self.path}"
        self.keys = tmp / "home" / ".ssh" / "authorized_keys"  # the user's, for these tests

    def init(self, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        args = ["fleet", "init-remote", str(self.path), "--user", USER, "--gate", str(self.gate)]
        return run_cli(*args, "--authorized-keys", str(self.keys), *extra, check=check)

    def authorize(self, host: str, check: bool = True) -> subprocess.CompletedProcess:
        """``memstrata fleet authorize HOST`` with a key of its own: makes ``hosts/HOST.git``."""
        pub = _key(self.tmp, f"key-{host}")
        self.keys.parent.mkdir(parents=True, exist_ok=True)
        args = ["fleet", "authorize", host, str(pub), "--user", USER, "--gate", str(self.gate)]
        return run_cli(*args, "--authorized-keys", str(self.keys), "--json", check=check)

    def host(self, host: str) -> Path:
        return self.path / "hosts" / f"{host}.git"

    def ssh_for(self, host: str) -> dict[str, str]:
        """The environment of a git client whose ssh lands on the gate as ``host``."""
        ssh = self.tmp / f"ssh-{host}"
        if not ssh.exists():
            ssh.write_text(f"#!/bin/sh\nfor last; do :; done\nSSH_ORIGINAL_COMMAND=$last exec {self.gate} {host}\n")
            ssh.chmod(0o755)
        return {"GIT_SSH_COMMAND": str(ssh), "GIT_SSH_VARIANT": "ssh"}

    def refs(self, host: str | None = None) -> dict[str, str]:
        """The refs of ``host``'s repository (of the top one without ``host``)."""
        where = self.host(host) if host else self.path
        out = git("--git-dir", str(where), "for-each-ref", "--format=%(refname) %(objectname)").stdout
        return dict(line.split() for line in out.splitlines())


def git(*args: str, env: dict[str, str] | None = None, check: bool = True, cwd: Path | None = None):
    full = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", **(env or {})}
    proc = subprocess.run(["git", *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def workspace(tmp: Path, name: str) -> Path:
    """A repository with one commit of its own (``name`` in it, so no two hosts share a commit)."""
    repo = tmp / name
    git("init", "-q", str(repo))
    commit(repo, name)
    return repo


def commit(repo: Path, text: str) -> str:
    (repo / "note.md").write_text(text + "\n")
    git("-C", str(repo), "add", "-A")
    git("-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", text)
    return git("-C", str(repo), "rev-parse", "HEAD").stdout.strip()


def has_object(repo: Path, sha: str) -> bool:
    return git("--git-dir", str(repo), "cat-file", "-e", sha, check=False).returncode == 0


@pytest.fixture
def remote(tmp_path):
    """The top repository, and spoke-1's and spoke-2's own (authorized before any shared core); made
    in this process, the library the commands call (the commands themselves are run by the tests)."""
    r = Remote(tmp_path)
    fleet_remote.init_remote(r.path, user=USER, gate=r.gate, authorized_keys=r.keys)
    r.keys.parent.mkdir(parents=True)
    for host in ("spoke-1", "spoke-2"):
        fleet_remote.authorize(host, _key(tmp_path, f"key-{host}"), user=USER, gate=r.gate, authorized_keys=r.keys)
    return r


# ---------------------------------------------------------------- init-remote


def test_init_remote_makes_the_bare_repository_its_hook_and_the_gate(remote):
    config = {key: git("--git-dir", str(remote.path), "config", "--get", key).stdout.strip() for key in CONFIG_KEYS}
    assert config == CONFIG_KEYS
    for hook in (remote.path / "hooks" / "update", remote.path / "hooks" / "post-receive"):
        assert hook.read_text().startswith("#!/bin/sh\n") and os.access(hook, os.X_OK)
    assert stat.S_IMODE((remote.path / "hosts").stat().st_mode) & 0o022 == 0  # hosts/ is the owner's
    for host in ("spoke-1", "spoke-2"):  # each host's repository: the same rules, its hook, its name
        repo = str(remote.host(host))
        assert {
            key: git("--git-dir", repo, "config", "--get", key).stdout.strip() for key in CONFIG_KEYS
        } == CONFIG_KEYS
        assert git("--git-dir", repo, "config", "memstrata.host").stdout.strip() == host
        assert (remote.host(host) / "hooks" / "update").read_text() == (remote.path / "hooks" / "update").read_text()
        assert stat.S_IMODE((remote.host(host) / "config").stat().st_mode) == 0o644
    gate = remote.gate.read_text()
    assert re.search(rf"^REPOSITORY = '{re.escape(str(remote.path))}'", gate, re.MULTILINE)
    assert gate.startswith("#!/usr/bin/python3 -I\n") and stat.S_IMODE(remote.gate.stat().st_mode) == 0o755
    # the gate is a copy of nothing of this checkout's: it imports the standard library only
    imports = {m.split(".")[0] for m in re.findall(r"^(?:from|import) (\S+)", gate, re.MULTILINE)}
    assert imports <= {"__future__", "os", "pwd", "re", "sys"}, imports
    # the top, config and hooks are the owner's alone; objects, refs and logs the git user's too, through
    # ACLs (a default one on each directory), never a set-group-ID bit (the daemon's unit refuses those)
    assert stat.S_IMODE(remote.path.stat().st_mode) & 0o022 == 0
    assert stat.S_IMODE((remote.path / "config").stat().st_mode) == 0o644
    assert posix_acl.named_user(remote.path) == {} and posix_acl.named_user(remote.path / "hooks") == {}
    uid = pwd.getpwnam(USER).pw_uid
    for repo in (remote.path, remote.host("spoke-1")):
        for part in ("objects", "refs", "logs"):
            assert posix_acl.named_user(repo / part, posix_acl.DEFAULT) == {uid: 7}, (repo, part)
            assert posix_acl.named_user(repo / part) == {uid: 7}, (repo, part)
        for entry in (repo / "objects").rglob("*"):
            assert not entry.stat().st_mode & stat.S_ISGID, entry


CONFIG_KEYS = {
    "core.logAllRefUpdates": "always",
    "receive.denyNonFastForwards": "true",
    "receive.denyDeletes": "true",
    "receive.fsckObjects": "true",
    "uploadpack.allowAnySHA1InWant": "false",
}


def test_init_remote_again_keeps_what_is_right_and_repairs_the_rest(remote):
    git("--git-dir", str(remote.path), "config", "receive.denyDeletes", "false")
    (remote.path / "hooks" / "update").write_text("#!/bin/sh\nexit 0\n")
    steps = json.loads(remote.init("--json").stdout)["steps"]
    assert {(s["action"], s["what"].split()[0]) for s in steps} >= {
        ("kept", str(remote.path)),
        ("set", "receive.denyDeletes=true"),
        ("wrote", str(remote.path / "hooks" / "update")),
        ("kept", str(remote.gate)),
    }
    assert git("--git-dir", str(remote.path), "config", "receive.denyDeletes").stdout.strip() == "true"
    assert "MEMSTRATA_FLEET_HOST" in (remote.path / "hooks" / "update").read_text()


def test_init_remote_again_repairs_each_hosts_repository_and_lists_hosts_refs_left_in_the_top(remote, tmp_path):
    """A top made before the repositories per host, spoke refs in it: named, left where they are."""
    spoke = remote.host("spoke-1")
    git("--git-dir", str(spoke), "config", "receive.denyNonFastForwards", "false")
    (spoke / "hooks" / "update").write_text("#!/bin/sh\nexit 0\n")
    ws = workspace(tmp_path, "old-spoke")
    old = "refs/memstrata/spoke-9/agent-x/daemon"
    git("-C", str(ws), "push", "-q", str(remote.path), f"HEAD:{old}")
    sha = remote.refs()[old]
    core = workspace(tmp_path, "hub-shared")
    git("-C", str(core), "push", "-q", str(remote.path), f"HEAD:{CORE}")
    shutil.rmtree(remote.host("spoke-2"))  # an authorized host without its repository (keys from before hosts/)
    proc = remote.init()
    assert f"set      {spoke}: receive.denyNonFastForwards=true" in proc.stdout, proc.stdout
    assert f"wrote    {spoke / 'hooks' / 'update'}" in proc.stdout
    assert "left there, not moved" in proc.stdout and f"left     {old} {sha}" in proc.stdout, proc.stdout
    assert remote.refs()[old] == sha and not (remote.path / "hosts" / "spoke-9.git").exists()
    assert f"created  {remote.host('spoke-2')}" in proc.stdout
    assert remote.refs("spoke-2") == {CORE: remote.refs()[CORE]}


def test_init_remote_refuses_what_is_not_a_bare_repository_or_a_plain_path(tmp_path):
    (tmp_path / "srv" / "fleet.git").mkdir(parents=True)
    (tmp_path / "srv" / "fleet.git" / "x").write_text("mine")
    refused = Remote(tmp_path).init("--json", check=False)
    assert refused.returncode == 1 and "not a bare git repository" in json.loads(refused.stdout)["error"]["message"]
    odd = run_cli("fleet", "init-remote", str(tmp_path / "it's.git"), "--user", USER, check=False)
    assert odd.returncode == 1 and "absolute path of letters" in odd.stderr


def test_the_gates_host_rule_is_the_agent_id_rule():
    assert fleet_gate.HOST_PATTERN == AGENT_ID_PATTERN


# ---------------------------------------------------------------- through the gate


def test_a_host_pushes_its_own_refs_fast_forward_and_nothing_else(remote, tmp_path):
    ws = workspace(tmp_path, "spoke-1-ws")
    as_spoke = remote.ssh_for("spoke-1")
    own = "refs/memstrata/spoke-1/agent-c/daemon"
    git("-C", str(ws), "push", "-q", remote.url, f"HEAD:{own}", env=as_spoke)
    second = commit(ws, "second")
    git("-C", str(ws), "push", "-q", remote.url, f"HEAD:{own}", env=as_spoke)
    git("-C", str(ws), "push", "-q", remote.url, "HEAD:refs/memstrata/spoke-1/agent-c/lost/one", env=as_spoke)
    assert remote.refs("spoke-1")[own] == second
    for other in ("refs/memstrata/spoke-2/agent-d/daemon", "refs/memstrata/shared/core", "refs/heads/x", "refs/tags/t"):
        refused = git("-C", str(ws), "push", remote.url, f"HEAD:{other}", env=as_spoke, check=False)
        assert refused.returncode != 0 and "rejected" in refused.stderr, (other, refused.stderr)
    # never rewound, never deleted
    git("-C", str(ws), "reset", "-q", "--hard", "HEAD~1")
    forced = git("-C", str(ws), "push", "--force", remote.url, f"HEAD:{own}", env=as_spoke, check=False)
    assert forced.returncode != 0 and "not a fast-forward" in forced.stderr, forced.stderr
    deleted = git("-C", str(ws), "push", remote.url, f":{own}", env=as_spoke, check=False)
    assert deleted.returncode != 0 and "never deleted" in deleted.stderr, deleted.stderr
    assert set(remote.refs("spoke-1")) == {own, "refs/memstrata/spoke-1/agent-c/lost/one"}
    assert remote.refs("spoke-1")[own] == second
    # all of it in spoke-1's repository: nothing in the top's or spoke-2's
    assert remote.refs() == {} and remote.refs("spoke-2") == {}


@pytest.mark.parametrize("version", ["0", "2"])
def test_a_host_sees_and_fetches_its_own_refs_and_the_shared_core_only(remote, tmp_path, version):
    shas = {}
    for host, agent in (("spoke-1", "agent-c"), ("spoke-2", "agent-d")):
        ws = workspace(tmp_path, f"{host}-ws")
        ref = f"HEAD:refs/memstrata/{host}/{agent}/daemon"
        git("-C", str(ws), "push", "-q", remote.url, ref, env=remote.ssh_for(host))
        shas[host] = git("-C", str(ws), "rev-parse", "HEAD").stdout.strip()
    core = workspace(tmp_path, "hub-shared")
    git("-C", str(core), "push", "-q", str(remote.path), "HEAD:refs/memstrata/shared/core")  # the hub, by the path
    as_spoke = {**remote.ssh_for("spoke-1"), "GIT_CONFIG_COUNT": "1"}
    as_spoke |= {"GIT_CONFIG_KEY_0": "protocol.version", "GIT_CONFIG_VALUE_0": version}
    listed = git("ls-remote", remote.url, env=as_spoke).stdout.split()
    assert sorted(listed[1::2]) == ["refs/memstrata/shared/core", "refs/memstrata/spoke-1/agent-c/daemon"], listed
    ws = tmp_path / "spoke-1-ws"
    git("-C", str(ws), "fetch", "-q", remote.url, "refs/memstrata/shared/core", env=as_spoke)
    stolen = git("-C", str(ws), "fetch", remote.url, shas["spoke-2"], env=as_spoke, check=False)
    assert stolen.returncode != 0, stolen.stderr
    theirs = "refs/memstrata/spoke-2/agent-d/daemon"
    by_name = git("-C", str(ws), "fetch", remote.url, theirs, env=as_spoke, check=False)
    assert by_name.returncode != 0, by_name.stderr
    assert git("-C", str(ws), "cat-file", "-e", shas["spoke-2"], check=False).returncode != 0


def test_the_object_attack_finds_nothing_in_a_hosts_own_repository(remote, tmp_path):
    """spoke-1 knows an object id of spoke-2's (a blob's id is the hash of guessable content): it
    pushes a ref of its own at it with an empty pack, then fetches that ref.  Where both hosts'
    objects share one repository this works (shown first, on such a repository); through the gate
    the id names nothing in spoke-1's repository."""
    theirs = workspace(tmp_path, "spoke-2-ws")
    git(
        "-C",
        str(theirs),
        "push",
        "-q",
        remote.url,
        "HEAD:refs/memstrata/spoke-2/agent-d/daemon",
        env=remote.ssh_for("spoke-2"),
    )
    blob = git("-C", str(theirs), "rev-parse", "HEAD:note.md").stdout.strip()
    commit_id = git("-C", str(theirs), "rev-parse", "HEAD").stdout.strip()
    # the attack is real: one repository holding both hosts' objects takes the ref
    shared = tmp_path / "one.git"
    git("init", "-q", "--bare", str(shared))
    git("-C", str(theirs), "push", "-q", str(shared), "HEAD:refs/memstrata/spoke-2/agent-d/daemon")
    control = _attack("refs/memstrata/spoke-1/agent-c/stolen", blob, "git", "receive-pack", str(shared))
    assert control.returncode == 0 and "ok refs/memstrata/spoke-1/agent-c/stolen" in control.stdout, control
    # through the gate, with spoke-1's key: refused, nothing written, nothing to fetch
    ws = workspace(tmp_path, "spoke-1-ws")
    as_spoke = remote.ssh_for("spoke-1")
    ssh = as_spoke["GIT_SSH_COMMAND"]
    for sha in (blob, commit_id):
        stolen = "refs/memstrata/spoke-1/agent-c/stolen"
        tried = _attack(stolen, sha, ssh, "hub", f"git-receive-pack '{remote.path}'")
        assert tried.returncode == 1 and f"ng {stolen} missing necessary objects" in tried.stdout, tried
        fetched = git("-C", str(ws), "fetch", remote.url, stolen, env=as_spoke, check=False)
        assert fetched.returncode != 0 and "couldn't find remote ref" in fetched.stderr, fetched.stderr
        assert not has_object(remote.host("spoke-1"), sha)
    assert remote.refs("spoke-1") == {}
    assert git("-C", str(ws), "cat-file", "-e", blob, check=False).returncode != 0


def _attack(ref: str, sha: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["python3", str(ATTACK), ref, sha, "--", *command], capture_output=True, text=True, timeout=60
    )


def test_the_hub_writes_the_shared_core_and_any_hosts_refs_through_the_path(remote, tmp_path):
    """No MEMSTRATA_FLEET_HOST: the hub's own push, fast-forward and under refs/memstrata/ still."""
    core = workspace(tmp_path, "hub-shared")
    for ref in ("refs/memstrata/shared/core", "refs/memstrata/hub/agent-a/daemon"):
        git("-C", str(core), "push", "-q", str(remote.path), f"HEAD:{ref}")
    commit(core, "next")
    git("-C", str(core), "push", "-q", str(remote.path), "HEAD:refs/memstrata/shared/core")
    git("-C", str(core), "reset", "-q", "--hard", "HEAD~1")
    rewound = git("-C", str(core), "push", "-f", str(remote.path), "HEAD:refs/memstrata/shared/core", check=False)
    assert rewound.returncode != 0 and "not a fast-forward" in rewound.stderr
    outside = git("-C", str(core), "push", str(remote.path), "HEAD:refs/heads/main", check=False)
    assert outside.returncode != 0 and "outside refs/memstrata/" in outside.stderr
    # every update is in the reflog, so a forced one could be counted
    log = git("--git-dir", str(remote.path), "reflog", "show", "refs/memstrata/shared/core").stdout.splitlines()
    assert len(log) == 2
    # the post-receive hook copied each core into every host's repository, fast-forward: its objects only
    core_sha = remote.refs()[CORE]
    hub_only = remote.refs()["refs/memstrata/hub/agent-a/daemon"]
    for host in ("spoke-1", "spoke-2"):
        assert remote.refs(host) == {CORE: core_sha}
        hlog = git("--git-dir", str(remote.host(host)), "reflog", "show", "--format=%H", CORE).stdout.split()
        assert hlog == [core_sha, hub_only]  # the first core, then the next (the hub's ref shares it)
    # a host authorized after the core was written gets it when its repository is made
    assert not remote.host("spoke-3").exists()
    proc = remote.authorize("spoke-3")
    assert remote.refs("spoke-3") == {CORE: core_sha}
    assert any(s["action"] == "copied" for s in json.loads(proc.stdout)["steps"])


def test_the_copy_of_the_shared_core_carries_its_objects_only(remote, tmp_path):
    hub = workspace(tmp_path, "hub-agent")
    git("-C", str(hub), "push", "-q", str(remote.path), "HEAD:refs/memstrata/hub/agent-a/daemon")
    core = workspace(tmp_path, "hub-shared")
    pushed = git("-C", str(core), "push", str(remote.path), f"HEAD:{CORE}")
    assert "not copied" not in pushed.stderr, pushed.stderr
    hub_sha = remote.refs()["refs/memstrata/hub/agent-a/daemon"]
    for host in ("spoke-1", "spoke-2"):
        assert remote.refs(host) == {CORE: remote.refs()[CORE]}
        assert not has_object(remote.host(host), hub_sha)
    # a host's repository whose copy is refused (its core moved by hand): said to the hub's push, never
    # forced there; the other hosts still get the core, and the next push tries again
    other = workspace(tmp_path, "elsewhere")
    git("-C", str(other), "push", "-q", str(remote.host("spoke-2")), "HEAD:refs/memstrata/spoke-2/x")
    moved = git("-C", str(other), "rev-parse", "HEAD").stdout.strip()
    git("--git-dir", str(remote.host("spoke-2")), "update-ref", CORE, moved)
    commit(core, "next")
    pushed = git("-C", str(core), "push", str(remote.path), f"HEAD:{CORE}")
    assert f"the shared core was not copied into {remote.host('spoke-2')}" in pushed.stderr, pushed.stderr
    assert "[rejected]" in pushed.stderr, pushed.stderr
    assert remote.refs("spoke-1")[CORE] == remote.refs()[CORE] != remote.refs("spoke-2")[CORE] == moved


@pytest.mark.parametrize(
    ("host", "ref", "allowed"),
    [
        ("spoke-1", "refs/memstrata/spoke-1/a/daemon", True),
        ("spoke-1", "refs/memstrata/spoke-10/a/daemon", False),
        ("spoke-1", "refs/memstrata/spoke-1", False),
        ("spoke-1", "refs/memstrata/shared/core", False),
        ("shared", "refs/memstrata/shared/core", False),
        ("", "refs/memstrata//a", False),
        ("*", "refs/memstrata/x/a", False),
        ("Spoke", "refs/memstrata/Spoke/a", False),
        ("spoke-2", "refs/memstrata/spoke-2/a/daemon", False),  # spoke-1's repository is not spoke-2's
    ],
)
def test_the_update_hook_holds_a_gated_host_to_its_prefix_in_its_own_repository(remote, tmp_path, host, ref, allowed):
    ws = workspace(tmp_path, "ws")
    gated = {"MEMSTRATA_FLEET_HOST": host}
    pushed = git("-C", str(ws), "push", str(remote.host("spoke-1")), f"HEAD:{ref}", env=gated, check=False)
    assert (pushed.returncode == 0) == allowed, pushed.stderr
    if allowed:  # and never in the top, whose refs no host writes
        top = git("-C", str(ws), "push", str(remote.path), f"HEAD:{ref}", env=gated, check=False)
        assert top.returncode != 0 and "not host spoke-1's" in top.stderr, top.stderr


def test_the_gate_refuses_a_host_without_a_repository(remote, tmp_path):
    ws = workspace(tmp_path, "ws")
    pushed = git(
        "-C",
        str(ws),
        "push",
        remote.url,
        "HEAD:refs/memstrata/spoke-3/a/daemon",
        env=remote.ssh_for("spoke-3"),
        check=False,
    )
    assert pushed.returncode != 0 and "host spoke-3 has no repository on the hub yet" in pushed.stderr, pushed.stderr
    assert not remote.host("spoke-3").exists()


def test_the_hub_lists_each_hosts_refs_and_reads_a_blob_at_one(remote, tmp_path):
    for host in ("spoke-1", "spoke-2"):
        ws = workspace(tmp_path, f"{host}-ws")
        (ws / "status.json").write_text(json.dumps({"host": host}))
        commit(ws, f"{host} status")
        git("-C", str(ws), "push", "-q", remote.url, f"HEAD:refs/memstrata/{host}/status", env=remote.ssh_for(host))
        git(
            "-C",
            str(ws),
            "push",
            "-q",
            remote.url,
            f"HEAD:refs/memstrata/{host}/agent-x/daemon",
            env=remote.ssh_for(host),
        )
    core = workspace(tmp_path, "hub-shared")
    git("-C", str(core), "push", "-q", str(remote.path), f"HEAD:{CORE}")
    listed = fleet_hosts.hosts(remote.path)
    assert [h.host for h in listed] == ["spoke-1", "spoke-2"]
    for entry in listed:
        assert entry.repository == remote.host(entry.host)
        own = {ref: sha for ref, sha in remote.refs(entry.host).items() if ref != CORE}
        assert entry.refs == own and set(own) == {
            f"refs/memstrata/{entry.host}/{r}" for r in ("status", "agent-x/daemon")
        }
        status = fleet_hosts.read_blob(entry.repository, f"refs/memstrata/{entry.host}/status", "status.json")
        assert status is not None and json.loads(status) == {"host": entry.host}
        assert fleet_hosts.read_blob(entry.repository, f"refs/memstrata/{entry.host}/status", "nothing.json") is None
        assert fleet_hosts.read_blob(entry.repository, f"refs/memstrata/{entry.host}/none", "status.json") is None
    for ref, path in (("HEAD", "status.json"), ("refs/memstrata/spoke-1/status", "../x"), ("--output=x", "a")):
        with pytest.raises(ValueError):
            fleet_hosts.read_blob(remote.host("spoke-1"), ref, path)
    # a directory that is no host's repository is no host
    (remote.path / "hosts" / "Bad.git").mkdir()
    (remote.path / "hosts" / "notes").mkdir()
    assert fleet_hosts.host_names(remote.path) == ["spoke-1", "spoke-2"]


# ---------------------------------------------------------------- hostile requests


def _hostile(repo: str, marker: str) -> list[str]:
    """What an attacker holding a key might send instead of the two commands (generated around them)."""
    cases = ["ls", "sh", "/bin/sh -c id", "git-upload-archive '{R}'", "git upload-pack '{R}'", "", " ", "scp -t /tmp"]
    for service in ("git-upload-pack", "git-receive-pack"):
        exact = f"{service} '{{R}}'"
        cases += [
            f"{service} {{R}}",
            f'{service} "{{R}}"',
            f"{service} '{{R}}/'",
            f"{service} '{{R}}/../fleet.git'",
            f"{service} '/etc'",
            f"{service} 'fleet.git'",
            f"{service} '{{R}}' '{{R}}'",
            f"{service} --upload-pack='touch {{M}}' '{{R}}'",
            f"{service} --strict '{{R}}'",
            f" {exact}",
            f"{exact} ",
            f"{exact}\t",
            exact.replace(" ", "\t"),
            exact.upper(),
        ]
        for glue in (";", "&&", "||", "|", "&", "\n", "\r\n", "`", "$(", "\x00"):
            cases.append(f"{exact}{glue}touch {{M}}")
            cases.append(f"touch {{M}}{glue}{exact}")
        cases.append(f"{exact[:-1]}'$(touch {{M}})'")
        cases.append(exact.replace("{R}", "{R}'; touch {M}; '"))
    return [case.replace("{R}", repo).replace("{M}", marker) for case in cases]


def test_the_gate_refuses_every_other_request_and_runs_nothing(remote, tmp_path):
    marker = tmp_path / "touched"
    cases = _hostile(str(remote.path), str(marker))
    assert len(cases) > 60
    for command in cases:
        env = {"PATH": os.environ["PATH"], "SSH_ORIGINAL_COMMAND": command.replace("\x00", "")}
        proc = subprocess.run([str(remote.gate), "spoke-1"], env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1 and proc.stdout == "", (command, proc)
        assert "memstrata fleet gate: refused" in proc.stderr, (command, proc.stderr)
    assert not marker.exists()
    # an interactive login (no command) and a key line naming no valid host
    proc = subprocess.run([str(remote.gate), "spoke-1"], env={}, capture_output=True, text=True)
    assert proc.returncode == 1 and "interactive login" in proc.stderr
    good = {"SSH_ORIGINAL_COMMAND": f"git-upload-pack '{remote.path}'"}
    for argv in (["shared"], ["../spoke-1"], [""], ["spoke-1", "spoke-2"], [], ["x" * 65]):
        proc = subprocess.run([str(remote.gate), *argv], env=good, capture_output=True, text=True, input="")
        assert proc.returncode == 1 and "names no valid host" in proc.stderr, (argv, proc.stderr)


# ---------------------------------------------------------------- authorize


def _key(tmp: Path, name: str) -> Path:
    path = tmp / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "whoever", "-f", str(path)], check=True)
    return path.with_suffix(".pub")


def authorize(tmp: Path, host: str, pub: Path, check: bool = True):
    """``memstrata fleet authorize`` with the gate of a top repository under ``tmp`` (made once)."""
    top = Remote(tmp)
    if not top.gate.exists():
        top.init()
    keys = tmp / "home" / ".ssh" / "authorized_keys"
    keys.parent.parent.mkdir(exist_ok=True)  # the user's home (authorize makes .ssh in it)
    args = [
        "fleet",
        "authorize",
        host,
        str(pub),
        "--user",
        USER,
        "--gate",
        str(top.gate),
        "--authorized-keys",
        str(keys),
    ]
    return run_cli(*args, "--json", check=check), keys


def test_authorize_writes_one_gated_line_per_host(tmp_path):
    one, two, again = _key(tmp_path, "one"), _key(tmp_path, "two"), _key(tmp_path, "again")
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorsOwnKeyOperatorsOwnKeyOperatorsO admin\n")
    authorize(tmp_path, "spoke-1", one)
    proc, keys = authorize(tmp_path, "spoke-2", two)
    gate = Remote(tmp_path).gate
    assert json.loads(proc.stdout)["line"].startswith(f'command="{gate} spoke-2",restrict ssh-ed25519 ')
    lines = keys.read_text().splitlines()
    assert len(lines) == 3 and lines[0].endswith(" admin")  # someone else's line is kept
    key_one = one.read_text().split()[1]
    assert lines[1] == f'command="{gate} spoke-1",restrict ssh-ed25519 {key_one} memstrata:spoke-1'
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    # a new key for spoke-1 replaces its line; nothing left beside the file
    authorize(tmp_path, "spoke-1", again)
    lines = keys.read_text().splitlines()
    assert len(lines) == 3 and lines[-1].split()[3] == again.read_text().split()[1]
    assert sorted(p.name for p in keys.parent.iterdir()) == ["authorized_keys"]


def test_authorize_refuses_a_key_of_another_host_a_reserved_or_bad_name_and_a_bad_key(tmp_path):
    one = _key(tmp_path, "one")
    _, keys = authorize(tmp_path, "spoke-1", one)
    before = keys.read_text()
    for host, pub, said in (
        ("spoke-2", one, "already in"),
        ("shared", _key(tmp_path, "s"), "reserved"),
        ("Spoke-3", _key(tmp_path, "u"), "invalid host name"),
        ("../x", _key(tmp_path, "d"), "invalid host name"),
        ("spoke-3", tmp_path / "one", "one OpenSSH public key"),  # the private key
    ):
        proc, _ = authorize(tmp_path, host, pub, check=False)
        assert proc.returncode == 1 and said in json.loads(proc.stdout)["error"]["message"], (host, proc.stdout)
    assert keys.read_text() == before
    assert sorted(p.name for p in (Remote(tmp_path).path / "hosts").iterdir()) == ["spoke-1.git"]  # nothing made
    # the same key on a line without the gate (sshd takes the first match): refused too
    keys.write_text(f"{one.read_text().strip()}\n")
    proc, _ = authorize(tmp_path, "spoke-1", one, check=False)
    assert proc.returncode == 1 and "not written by memstrata fleet authorize" in proc.stdout


def test_authorize_needs_the_gate_of_a_top_repository(tmp_path):
    keys = tmp_path / "authorized_keys"
    args = ["fleet", "authorize", "spoke-1", str(_key(tmp_path, "one")), "--user", USER, "--authorized-keys", str(keys)]
    proc = run_cli(*args, "--gate", str(tmp_path / "no-gate"), check=False)
    assert proc.returncode == 1 and "run memstrata fleet init-remote first" in proc.stderr, proc.stderr
    assert not keys.exists()
