"""The fleet's remote on the hub: its repositories, their hooks, the gate and the hosts' keys.

``memstrata fleet init-remote`` and ``memstrata fleet authorize`` (daemon/front/fleet_commands.py)
call :func:`init_remote` and :func:`authorize`.  One URL for every host, one bare repository per host
behind it::

    /srv/memstrata/fleet.git              the top: the hub's own agents' refs, the shared core
    /srv/memstrata/fleet.git/hosts/H.git  host H's own: refs/memstrata/H/…, a copy of the shared core

- ``refs/memstrata/<host>/<agent>/…`` is written by ``<host>`` alone, through ssh with its own key,
  whose forced command is the gate (daemon/ops/fleet_gate.py, installed as a copy outside any
  checkout) naming the host: the gate serves that host's repository and no other; never rewound,
  never deleted;
- ``refs/memstrata/shared/core`` is written by the hub alone, into the top through its path on the
  hub's own disk (no key reaches the top); the top's ``post-receive`` hook copies it into every
  host's repository (a plain push of that one ref: its objects only), and :func:`authorize` into a
  new host's.

Why repositories apart: git's hidden refs hide names, not objects (gitnamespaces(7), "Security").  In
one repository a host that knows (or guesses: a blob's id is the hash of its content) an object id
of another host's could push a ref of its own naming it (an empty pack: the object is there) and
then fetch it.  In its own repository that id names nothing.

Who owns what, in each repository: its top, ``config``, ``hooks/`` and ``info/`` are root's (read by
all), so the ``git`` user behind the gate cannot change what root's own git runs there (a hook, a
config key); ``objects/``, ``refs/`` and ``logs/`` are writable for the ``git`` user through POSIX
ACLs, a default one on each directory, so that what root's pushes make there stays writable for it
and what its pushes make stays root's to add to (daemon/ops/posix_acl.py: no set-group-ID directory,
which the daemon's unit refuses); ``hosts/`` is root's.  ``receive.denyNonFastForwards`` and
``receive.denyDeletes`` hold for ``refs/heads/`` only (git's rule): under ``refs/memstrata/`` the
update hook is what refuses a rewind or a deletion.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pwd
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from daemon.ops import fleet_gate, fleet_hosts, posix_acl

GATE = Path("/usr/local/lib/memstrata/fleet-gate")
GIT_USER = "git"
GATE_COMMAND = "memstrata-fleet-gate"  # its name in ~/git-shell-commands/ for a git-shell user
RESERVED_HOSTS = fleet_gate.RESERVED_HOSTS
# what the remote enforces whoever pushes (the gate gives the receive rules on git's command line too)
CONFIG = {
    "core.logAllRefUpdates": "always",  # a reflog on a bare repository: every update of a ref, forced or not
    "core.sharedRepository": "umask",  # what a file may be is the directory's default ACL's, not chmod's
    "receive.denyNonFastForwards": "true",
    "receive.denyDeletes": "true",
    "receive.fsckObjects": "true",
    "receive.autogc": "false",  # a gc run by the git user would write root's top directory
    "uploadpack.allowTipSHA1InWant": "false",
    "uploadpack.allowReachableSHA1InWant": "false",
    "uploadpack.allowAnySHA1InWant": "false",
}
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")  # said inside single quotes by git and the gate, as is
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
KEY_IN_LINE = re.compile(r"(?:^|[\s,])(" + "|".join(re.escape(t) for t in KEY_TYPES) + r")\s+([A-Za-z0-9+/]+=*)")
SHARED_CORE = fleet_hosts.SHARED_CORE
HOST_KEY = "memstrata.host"  # in a host's repository: whose it is (the update hook checks the gate's host)
GATE_REPOSITORY = re.compile(r"^REPOSITORY = '(/[A-Za-z0-9._/-]+)'", re.MULTILINE)
MARK = re.compile(r"\smemstrata:(\S+)\s*$")  # the comment authorize gives its lines

# The update hook: a push through the gate names its host; one through the path (the hub's) does not.
UPDATE_HOOK = r"""#!/bin/sh
# memstrata fleet (written by `memstrata fleet init-remote`; run again to restore it).
# A push through ssh comes through the gate, which sets MEMSTRATA_FLEET_HOST: that host writes
# refs/memstrata/<host>/ only, in its own repository only (memstrata.host), fast-forward only, no
# deletion.  A push through the repository's path on the hub (the variable unset) writes under
# refs/memstrata/ (the shared core, the hub's own refs).
LC_ALL=C
export LC_ALL
ref=$1 old=$2 new=$3
zero=0000000000000000000000000000000000000000
refuse() { echo "memstrata fleet: refused $ref: $*" >&2; exit 1; }
case $ref in refs/memstrata/?*) ;; *) refuse "outside refs/memstrata/" ;; esac
if [ -n "${MEMSTRATA_FLEET_HOST+set}" ]; then
    host=$MEMSTRATA_FLEET_HOST
    case $host in
        '' | shared | *[!a-z0-9_-]* | [!a-z0-9]*) refuse "no valid host named by the gate" ;;
    esac
    [ "${#host}" -le 64 ] || refuse "no valid host named by the gate"
    case $ref in
        "refs/memstrata/$host/"?*) ;;
        *) refuse "host $host writes refs/memstrata/$host/ only" ;;
    esac
    [ "$(git config --get memstrata.host)" = "$host" ] || refuse "this repository is not host $host's"
fi
[ "$new" != "$zero" ] || refuse "refs are never deleted"
if [ "$old" != "$zero" ]; then
    git merge-base --is-ancestor "$old" "$new" || refuse "not a fast-forward (refs are never rewound)"
fi
exit 0
"""

# The top's post-receive hook: the shared core, once the hub pushed it, into every host's repository.
# A hook of the repository, not the job of push_shared's caller: it holds for whoever writes the core
# (the daemon, an operator's push by hand, a caller yet to come), none of which need know hosts/.
# post-receive, not reference-transaction: it runs once per push, after the refs are written and out
# of every lock (a copy that fails never undoes nor holds back the core, and is said to the pusher),
# where reference-transaction runs inside every ref update of every git command in the repository.
# What it cannot see, a ref written without a push (git update-ref in the top), init-remote repairs.
POST_RECEIVE_HOOK = r"""#!/bin/sh
# memstrata fleet (written by `memstrata fleet init-remote`; run again to restore it).
# When refs/memstrata/shared/core moved here, push it (its current value, never forced: the host
# repository's update hook holds it to a fast-forward) into every hosts/*.git: the objects of the
# shared core only.  A copy that fails is said here and done again by the next change of the core,
# or by `memstrata fleet init-remote` run again.
LC_ALL=C
export LC_ALL
unset MEMSTRATA_FLEET_HOST
core=refs/memstrata/shared/core
moved=
while read -r old new ref; do
    [ "$ref" = "$core" ] && moved=yes
done
[ -n "$moved" ] || exit 0
top=$(pwd -P)
failed=0
for repo in "$top"/hosts/*.git; do
    [ -d "$repo" ] && [ ! -L "$repo" ] || continue
    if ! out=$(git push --quiet --no-verify "$repo" "$core:$core" 2>&1); then
        echo "memstrata fleet: the shared core was not copied into $repo: $(echo "$out" | tr -s '\n\t ' ' ')" >&2
        failed=1
    fi
done
exit $failed
"""


class RemoteError(Exception):
    """Something the operator must fix (said as one line by the command)."""


@dataclass
class Steps:
    """What a command did, one ``(action, what)`` per step (the CLI's lines, or its JSON)."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    def add(self, action: str, what: str) -> None:
        self.lines.append((action, what))


def check_host(host: str) -> str:
    if host in RESERVED_HOSTS:
        raise RemoteError(
            f"{host!r} is reserved (refs/memstrata/{host}/ is the hub's shared core): name the host otherwise"
        )
    if not fleet_gate.valid_host(host):
        raise RemoteError(
            f"invalid host name {host!r}: use 1-64 characters from a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return host


def check_path(path: Path, what: str) -> str:
    text = str(path)
    if not SAFE_PATH.match(text) or "/../" in f"{text}/" or "/./" in f"{text}/":
        raise RemoteError(f"{what} {text!r}: give an absolute path of letters, digits and . _ - / (no '..')")
    return text


# ---------------------------------------------------------------- the remote


def init_remote(path: Path, user: str = GIT_USER, gate: Path = GATE, authorized_keys: Path | None = None) -> Steps:
    """Create (or check and repair) the fleet's top repository at ``path``, its hooks, the gate, and
    every host's repository: those under ``hosts/`` and those of the hosts ``authorize`` gave a key
    in ``user``'s ``authorized_keys`` (a remote made before the repositories per host), each given
    the current shared core."""
    repository = check_path(path, "repository")
    check_path(gate, "gate")
    uid, _gid, home, _shell = _account(user)
    steps = Steps()
    _repository(path, uid, steps, hooks={"update": UPDATE_HOOK, "post-receive": POST_RECEIVE_HOOK})
    hosts = path / fleet_gate.HOSTS
    if hosts.is_symlink() or (hosts.exists() and not hosts.is_dir()):
        raise RemoteError(f"{hosts} exists and is not a directory")
    if not hosts.exists():
        hosts.mkdir()
        steps.add("created", f"{hosts} (a repository per host: memstrata fleet authorize HOST)")
    os.chmod(hosts, 0o755)
    keys = authorized_keys or Path(home) / ".ssh" / "authorized_keys"
    for host in sorted({*fleet_hosts.host_names(path), *_authorized_hosts(keys)}):
        _host_repository(path, host, uid, steps)
    gate.parent.mkdir(parents=True, exist_ok=True)
    steps.add(
        _install(gate, gate_text(repository)),
        f"{gate} (the forced command of every host's key: serves {repository}/hosts/HOST.git for HOST)",
    )
    _left_in_top(path, steps)
    return steps


def _authorized_hosts(keys: Path) -> list[str]:
    """The hosts of the gated lines ``authorize`` wrote (none when the file is missing)."""
    try:
        lines = keys.read_text().splitlines()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RemoteError(f"cannot read {keys}: {exc.strerror}") from None
    found = (MARK.search(line) for line in lines if line.lstrip().startswith("command="))
    return [mark.group(1) for mark in found if mark is not None and fleet_gate.valid_host(mark.group(1))]


def _left_in_top(path: Path, steps: Steps) -> None:
    """Name the refs of hosts in the top (pushed there before each host had its own repository): they
    stay where they are, and no host reads them through the gate any more."""
    found = {ref: sha for ref, sha in fleet_hosts.refs(path).items() if not ref.startswith("refs/memstrata/shared/")}
    if not found:
        return
    steps.add(
        "note",
        f"{len(found)} host ref(s) in the top repository {path}: left there, not moved (the hub's own agents' "
        "belong there; a spoke's were pushed before hosts/ and its key reads them no more)",
    )
    for ref, sha in sorted(found.items()):
        steps.add("left", f"{ref} {sha}")


def _repository(path: Path, user: int, steps: Steps, hooks: dict[str, str], host: str | None = None) -> None:
    """One bare repository of the fleet: made or checked, its config, hooks and owners set."""
    repository = str(path)
    if path.exists() or path.is_symlink():
        if (
            path.is_symlink()
            or _git(repository, "rev-parse", "--is-bare-repository", check=False).stdout.strip() != "true"
        ):
            raise RemoteError(f"{repository} exists and is not a bare git repository")
        steps.add("kept", repository)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        _run(["git", "init", "-q", "--bare", "--initial-branch=main", repository])
        steps.add("created", repository)
    config = dict(CONFIG) if host is None else {**CONFIG, HOST_KEY: host}
    changed = []
    for key, value in config.items():
        if _git(repository, "config", "--get", key, check=False).stdout.strip() != value:
            _git(repository, "config", key, value)
            changed.append(f"{key}={value}")
    if host is None:
        for setting in changed:
            steps.add("set", setting)
    elif changed:  # a host's repository: one line (the top's lines said what each key is for)
        steps.add("set", f"{repository}: {' '.join(changed)}")
    # HEAD names a branch nobody writes: a resolving HEAD would show its target's name to every host
    if _git(repository, "symbolic-ref", "HEAD", check=False).stdout.strip() != "refs/heads/main":
        _git(repository, "symbolic-ref", "HEAD", "refs/heads/main")
        steps.add("set", f"{repository}: HEAD -> refs/heads/main")
    (path / "logs").mkdir(exist_ok=True)
    for name, text in hooks.items():
        steps.add(_install(path / "hooks" / name, text), str(path / "hooks" / name))
    _own(path, user)
    steps.add("owned", f"{repository}: its refs, objects and logs writable by user {pwd.getpwuid(user).pw_name}")


def _host_repository(top: Path, host: str, user: int, steps: Steps) -> Path:
    """``host``'s own repository under ``top`` (made or repaired), holding the current shared core."""
    path = fleet_hosts.host_repository(top, host)
    _repository(path, user, steps, hooks={"update": UPDATE_HOOK}, host=host)
    copy_shared_core(top, path, steps)
    return path


def copy_shared_core(top: Path, target: Path, steps: Steps) -> None:
    """The top's shared core into ``target`` (a host's repository), never forced; nothing when the
    top has none yet or ``target`` has it already.  What the top's post-receive hook does for every host."""
    core = _git(str(top), "rev-parse", "--verify", "-q", f"{SHARED_CORE}^{{commit}}", check=False).stdout.strip()
    if not core:
        return
    if _git(str(target), "rev-parse", "--verify", "-q", SHARED_CORE, check=False).stdout.strip() == core:
        return
    env = {k: v for k, v in os.environ.items() if k != "MEMSTRATA_FLEET_HOST"}
    pushed = _git(str(top), "push", "--quiet", "--no-verify", str(target), f"{SHARED_CORE}:{SHARED_CORE}", env=env)
    said = pushed.stderr.strip()
    steps.add("copied", f"{SHARED_CORE} {core[:12]} into {target}" + (f" ({said})" if said else ""))


def gate_text(repository: str) -> str:
    """The gate's source with the repository written in (the installed copy imports nothing of ours)."""
    source = Path(fleet_gate.__file__).read_text()
    line = re.compile(r"^REPOSITORY = .*$", re.MULTILINE)
    if len(line.findall(source)) != 1:
        raise RemoteError("daemon/ops/fleet_gate.py has no single REPOSITORY line to fill in")
    return line.sub(lambda _m: f"REPOSITORY = {repository!r}  # the repository this gate guards", source)


def _own(path: Path, user: int) -> None:
    """Root's top, config, hooks and info, read by all; its refs, objects and logs ``user``'s to write
    too, through POSIX ACLs (whoever made what is in them).  Set-group-ID bits an older init-remote
    gave are taken off: the daemon's unit refuses them (``RestrictSUIDSGID=yes``)."""
    owner = os.geteuid()
    if owner != 0 and path.stat().st_uid != owner:
        raise RemoteError(f"run this as root: {path} is not yours to give the git user rights on")
    os.chown(path, owner, os.getegid())
    os.chmod(path, 0o755)
    for name in ("config", "HEAD", "description", "packed-refs"):
        with contextlib.suppress(FileNotFoundError):
            os.chown(path / name, owner, os.getegid())
            os.chmod(path / name, 0o644)
    for name in ("hooks", "info", "branches"):
        for root, _dirs, files in os.walk(path / name):
            os.chown(root, owner, os.getegid())
            os.chmod(root, 0o755)
            for entry in files:
                os.chown(Path(root) / entry, owner, os.getegid(), follow_symlinks=False)
                os.chmod(Path(root) / entry, os.lstat(Path(root) / entry).st_mode & 0o755)
    for name in ("objects", "refs", "logs"):
        for root, _dirs, _files in os.walk(path / name):
            os.chmod(root, os.stat(root).st_mode & 0o777 | 0o755)
        try:
            posix_acl.grant_tree(path / name, user)
        except posix_acl.AclUnsupported as exc:
            raise RemoteError(f"{exc.strerror}: mount it with POSIX ACLs (ext4, xfs and btrfs keep them)") from None


# ---------------------------------------------------------------- the hosts' keys


def authorize(
    host: str,
    pubkey: Path,
    user: str = GIT_USER,
    gate: Path = GATE,
    authorized_keys: Path | None = None,
    repository: Path | None = None,
) -> tuple[Path, str, Steps]:
    """Make ``host``'s own repository (``<repository>/hosts/<host>.git``, the current shared core in
    it), then give ``host``'s key the gate as its forced command in ``user``'s ``authorized_keys``.

    ``repository`` is the top one, by default the one the installed gate serves.  Returns the
    file, the line and what was done.  A line of the same host is replaced; a key already on
    another line (another host's, or one without the gate: sshd takes the first line that matches)
    is refused, before anything is made."""
    check_host(host)
    gate_path = check_path(gate, "gate")
    key_type, key = _public_key(pubkey)
    uid, gid, home, shell = _account(user)
    target = authorized_keys or Path(home) / ".ssh" / "authorized_keys"
    top = Path(check_path(repository, "repository")) if repository is not None else served_by(gate)
    steps = Steps()
    command = f"{gate_path} {host}"
    if Path(shell).name == "git-shell":
        command = f"{_git_shell_command(Path(home), gate, steps)} {host}"
    line = f'command="{command}",restrict {key_type} {key} memstrata:{host}'
    kept: list[str] = []
    old = target.read_text().splitlines() if target.exists() else []
    for number, existing in enumerate(old, 1):
        mark = MARK.search(existing)
        found = KEY_IN_LINE.search(existing)
        same_key = found is not None and found.group(2) == key
        if mark is not None and mark.group(1) == host and existing.lstrip().startswith("command="):
            steps.add("replaced", f"{target}:{number} (host {host})")
            continue
        if same_key:
            owner = f"host {mark.group(1)}" if mark else "a line not written by memstrata fleet authorize"
            raise RemoteError(f"this key is already in {target} on line {number} ({owner}): a key is one host's only")
        kept.append(existing)
    _host_repository(top, host, uid, steps)
    if not target.parent.exists():
        target.parent.mkdir(mode=0o700)
        os.chown(target.parent, uid, gid)
        steps.add("created", str(target.parent))
    _write(target, "".join(f"{entry}\n" for entry in [*kept, line]), 0o600, owner=(uid, gid))
    steps.add("wrote", f"{target} (host {host}: the gate {gate_path} and nothing else)")
    return target, line, steps


def served_by(gate: Path) -> Path:
    """The top repository the installed gate serves (init-remote wrote it in)."""
    try:
        text = gate.read_text()
    except OSError as exc:
        raise RemoteError(f"no gate at {gate} ({exc.strerror}): run memstrata fleet init-remote first") from None
    found = GATE_REPOSITORY.findall(text)
    if len(found) != 1:
        raise RemoteError(f"{gate} names no repository: run memstrata fleet init-remote again")
    top = Path(found[0])
    if not (top / fleet_gate.HOSTS).is_dir():
        raise RemoteError(f"{top} (served by {gate}) has no hosts/: run memstrata fleet init-remote {top} again")
    return top


def _public_key(pubkey: Path) -> tuple[str, str]:
    """``(type, base64)`` of the one public key in the file (its comment and options dropped)."""
    try:
        text = pubkey.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RemoteError(f"cannot read the public key {pubkey}: {exc}") from None
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    parts = lines[0].split() if len(lines) == 1 else []
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise RemoteError(f"{pubkey}: give one OpenSSH public key (a line 'ssh-ed25519 AAAA… comment'), no options")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except ValueError:
        raise RemoteError(f"{pubkey}: the key is not base64") from None
    if blob[4 : 4 + len(parts[0])] != parts[0].encode():
        raise RemoteError(f"{pubkey}: the key's data does not say its type {parts[0]}")
    return parts[0], parts[1]


# ---------------------------------------------------------------- helpers


def _git_shell_command(home: Path, gate: Path, steps: Steps) -> str:
    """The gate's name for a user whose shell is git-shell: sshd runs ``git-shell -c COMMAND``, and
    git-shell runs nothing but git's own commands and ``~/git-shell-commands/NAME`` (no '/' in NAME),
    so the gate is linked there, in a directory of root's."""
    commands = home / "git-shell-commands"
    commands.mkdir(mode=0o755, exist_ok=True)
    link = commands / GATE_COMMAND
    if not (link.is_symlink() and os.readlink(link) == str(gate)):
        tmp = commands / f".{GATE_COMMAND}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(gate)
        os.replace(tmp, link)
        steps.add("linked", f"{link} -> {gate} (the user's shell is git-shell)")
    return GATE_COMMAND


def _account(user: str) -> tuple[int, int, str, str]:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise RemoteError(
            f"no user {user!r} on this host (create it: useradd --shell /usr/bin/git-shell {user})"
        ) from None
    return entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_shell


def _install(path: Path, text: str) -> str:
    """An executable of root's (a hook, the gate): ``kept`` when it is already what it should be."""
    with contextlib.suppress(OSError):
        st = path.lstat()
        if path.read_text() == text and st.st_mode & 0o7777 == 0o755 and st.st_uid == os.geteuid():
            return "kept"
    _write(path, text, 0o755)
    return "wrote"


def _write(path: Path, text: str, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Beside, fsync, chmod and chown, rename: the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            if owner is not None and (os.geteuid() == 0 or owner[0] != os.getuid()):
                os.fchown(handle.fileno(), *owner)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _git(
    repository: str, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = ["git", "-c", f"safe.directory={repository}", "--git-dir", repository, *args]
    return _run(argv, check=check, env=env)


def _run(argv: list[str], check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env={**(env or os.environ), "LC_ALL": "C"})
    if check and proc.returncode != 0:
        raise RemoteError(f"{' '.join(argv)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc
