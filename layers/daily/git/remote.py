"""The daemon's history copies on a central git remote: pushed never forced, how far behind, restored.

Each host pushes each agent's :class:`~layers.daily.git.history_copy.HistoryCopy` (never the
workspace's ``.git``: nothing an agent does to its repository reaches the remote) to refs of its own::

    refs/memstrata/<host>/<agent>/line/<n>     <- the copy's refs/heads/daemon, n = its refs/lost/* count
    refs/memstrata/<host>/<agent>/lost/<x>     <- the copy's refs/lost/<x>

Each line of history has a ref of its own: when the agent rewrites its workspace's history, the
copy keeps the old line as ``refs/lost/<x>`` and its daemon ref starts a line that does not descend
from the pushed one.  Pushed to the same ref, that could only be refused (or forced); counting the
copy's recorded rewrites gives the new line a new ref, reached fast-forward like any other, and
the old line stays on the remote as it was.  :func:`restore` takes the highest line.

No refspec has a ``+`` and no ``--force`` is ever given: a ref the remote holds that is not an
ancestor of what is pushed (someone rewrote it there) is refused by git itself and stays as it is;
the refusal is reported (:class:`RefUpdate`), never retried with force.  A ref the remote holds
*behind* what it last acknowledged (moved back to an older commit of the line, deleted, or a remote
restored from an older backup) is a fast-forward of what is pushed: git takes it, the commits the
remote had lost are on it again, and the answer says so (``RefUpdate.rewound_from``), so that it is
never undone without a trace.

What the remote acknowledged is written down in the copy, after the acknowledgement, as
``refs/pushed/<host>/<agent>/...`` (synced): :func:`behind` counts the commits the remote does not
have yet.  The copy itself is the backlog (every commit is in it, durably, before the workspace
shows it); a crash between the remote's acknowledgement and that ref only makes the next push
find the remote up to date.  These refs say what *this* remote and *this* host name were last told:
after either changes, the next push (the daemon pushes at start) sets them right.

Only the ``file`` and ``ssh`` transports are allowed (``GIT_ALLOW_PROTOCOL``: no ``ext::`` helper,
no http); ssh runs in batch mode with the caller's key, a connect timeout and the caller's
known-hosts policy, and the whole command has a deadline.  Messages carry git's reason, with any
password in the URL masked; a key file is named by its path, its content is never read here.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from layers.common import safefs
from layers.daily.git.history_copy import DAEMON_REF, LOST_PREFIX, HistoryCopy
from layers.daily.git.run import NEUTRAL_CONFIG, Cancel, Git, GitFailed, run_answer, sync_dirs, sync_tree
from protocol.vocabulary import AGENT_ID_PATTERN

REF_ROOT = "refs/memstrata"
PUSHED_ROOT = "refs/pushed"
LINE = "line/"  # refs/memstrata/<host>/<agent>/line/<n>
LOST = "lost/"
_RESTORING = "refs/restoring/"
_NAME_RE = re.compile(AGENT_ID_PATTERN)
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
HOST_KEY_POLICIES = ("accept-new", "yes")


class RemoteNameError(ValueError):
    """A host or agent name that cannot be one component of a ref (``..``, ``/``, ``-x``, a space...)."""


class Unreachable(RuntimeError):
    """The remote could not be used at all (no such repository, no route, refused, timed out): git's reason.

    Nothing was pushed or fetched; the caller keeps its backlog and tries again later.
    """

    def __init__(self, remote: str, reason: str) -> None:
        self.remote = remote
        self.reason = reason
        super().__init__(f"remote {remote} unreachable: {reason}")


class NotOnRemote(LookupError):
    """The remote holds nothing under the refs asked for (no such host or agent there)."""


def check_name(value: str, what: str = "name") -> str:
    """``value`` when it may be one component of a ref here (the agent-id pattern), else RemoteNameError."""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):  # match's $ passes a final newline
        raise RemoteNameError(
            f"{what} {value!r} cannot name refs on the remote: it must match {AGENT_ID_PATTERN} "
            "(lower-case letters, digits, '-' and '_', at most 64, not starting with '-' or '_')"
        )
    return value


def remote_prefix(host: str, agent: str) -> str:
    """``refs/memstrata/<host>/<agent>/``: where one agent of one host lives on the remote."""
    return f"{REF_ROOT}/{check_name(host, 'host')}/{check_name(agent, 'agent')}/"


def _pushed_prefix(host: str, agent: str) -> str:
    return f"{PUSHED_ROOT}/{check_name(host, 'host')}/{check_name(agent, 'agent')}/"


def shown_url(url: str) -> str:
    """``url`` with a password in it masked (``ssh://user:secret@h/x`` -> ``ssh://user:***@h/x``)."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/@:]*):[^/@]*@", r"\1:***@", url)


@dataclass(frozen=True)
class Remote:
    """Where and how to reach the central repository.

    ``url`` is a git URL (``ssh://git@10.231.0.1/srv/memstrata/fleet.git``, ``git@hub:fleet.git``,
    ``file:///srv/fleet.git``) or a plain path to a bare repository on this machine.
    ``key_file`` and ``known_hosts`` are for ssh only; ``host_keys`` is ssh's
    StrictHostKeyChecking: ``accept-new`` (a first key is written to ``known_hosts``, a changed one
    refused) or ``yes`` (only keys already there).
    """

    url: str
    key_file: Path | None = None
    known_hosts: Path | None = None
    host_keys: str = "accept-new"
    connect_timeout_s: int = 10
    timeout_s: float = 120.0  # the whole push or fetch

    def __post_init__(self) -> None:
        if not self.url or self.url.startswith("-") or any(c in self.url for c in "\0\n\r"):
            raise ValueError(f"not a git remote: {shown_url(self.url)!r}")
        if self.host_keys not in HOST_KEY_POLICIES:
            raise ValueError(f"host_keys must be one of {HOST_KEY_POLICIES}, not {self.host_keys!r}")

    @property
    def shown(self) -> str:
        return shown_url(self.url)

    def env(self) -> dict[str, str | None]:
        """The variables every command that talks to the remote gets (see the module docstring)."""
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.connect_timeout_s)}"]
        ssh += ["-o", f"StrictHostKeyChecking={self.host_keys}"]
        if self.known_hosts is not None:
            ssh += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.key_file is not None:
            ssh += ["-i", str(self.key_file), "-o", "IdentitiesOnly=yes"]
        return {
            "GIT_SSH_COMMAND": shlex.join(ssh),
            "GIT_SSH": None,
            "GIT_SSH_VARIANT": "ssh",
            "GIT_ALLOW_PROTOCOL": "file:ssh",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": None,
            "SSH_ASKPASS": None,
            "GIT_DIR": None,
            "GIT_INDEX_FILE": None,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": None,
        }


def remote_git(remote: Remote, git_dir: Path, cancel: Cancel | None = None) -> Git:
    """git in the local bare repository ``git_dir``, set up to talk to ``remote``."""
    options = [arg for key, value in NEUTRAL_CONFIG for arg in ("-c", f"{key}={value}")]
    options += ["-c", "push.gpgSign=false", "-c", "fetch.recurseSubmodules=false"]
    return Git(["git", f"--git-dir={git_dir}", *options], remote.env(), git_dir, cancel)


def talk(git: Git, remote: Remote, *args: str) -> tuple[int, bytes, str]:
    """``git ARGS`` that reaches ``remote``: (exit status, stdout, git's reason); Unreachable past the deadline."""
    try:
        status, out, err = run_answer(
            [*git.prefix, *args], git.env, timeout=remote.timeout_s, cancel=git.cancel, what=args[0]
        )
    except GitFailed as exc:  # the deadline
        raise Unreachable(remote.shown, f"no answer within {remote.timeout_s:g} s: {exc.stderr}") from None
    return status, out, _clean(os.fsdecode(err), remote)


_BOILERPLATE = (
    "fatal: Could not read from remote repository.",
    "Please make sure you have the correct access rights",
    "and the repository exists.",
)


def _clean(text: str, remote: Remote) -> str:
    """git's (and ssh's) own reason, without the boilerplate it ends with; the URL's password masked."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    picked = [line for line in lines if not line.startswith(("hint:", "To ")) and line not in _BOILERPLATE]
    return "; ".join(picked[-3:] or lines[-1:]).replace(remote.url, remote.shown) or "git said nothing"


# ---------------------------------------------------------------- push


@dataclass(frozen=True)
class RefUpdate:
    """One ref of one push, as the remote answered it.

    ``status``: ``new`` (created), ``moved`` (fast-forwarded), ``unchanged`` (the remote had it
    already) or ``refused``; ``reason`` is git's word for a refusal (``non-fast-forward``,
    ``fetch first``: the remote's ref moved, someone rewrote it; ``remote rejected: ...``: a hook
    or the remote's settings).  ``rewritten_here`` marks the one refusal that is not the remote's
    doing: this copy's daemon ref no longer descends from what was last pushed (the agent rewrote
    its history; the old one is in ``refs/lost/`` and is pushed there).

    ``rewound_from`` is set when the remote no longer held what it had acknowledged on this ref
    (someone moved it back, deleted it, or put back an older copy of the remote) and this push
    brought those commits back: the commit it had acknowledged; ``found`` is what it held instead
    (a commit, abbreviated as git said it, or empty for no ref).
    """

    local: str
    remote: str
    sha: str
    status: str
    reason: str = ""
    rewritten_here: bool = False
    rewound_from: str = ""
    found: str = ""


@dataclass(frozen=True)
class Pushed:
    """What one push did, ref by ref."""

    remote: str
    updates: list[RefUpdate] = field(default_factory=list)

    @property
    def moved(self) -> list[RefUpdate]:
        return [u for u in self.updates if u.status in ("new", "moved")]

    @property
    def refused(self) -> list[RefUpdate]:
        return [u for u in self.updates if u.status == "refused"]

    @property
    def rewound(self) -> list[RefUpdate]:
        return [u for u in self.updates if u.rewound_from]

    @property
    def ok(self) -> bool:
        return not self.refused


def local_refs(copy: HistoryCopy) -> dict[str, str]:
    """The copy's daemon ref and lost refs (what a push offers): ref -> sha."""
    if not copy.exists:
        return {}
    out = copy.runner().run("for-each-ref", "--format=%(objectname) %(refname)", DAEMON_REF, LOST_PREFIX)
    refs = {}
    for line in out.decode(errors="replace").splitlines():
        sha, _, ref = line.partition(" ")
        refs[ref] = sha
    return refs


def line_of(local: dict[str, str]) -> int:
    """The line the daemon ref is on: how many rewrites the copy recorded (its lost refs)."""
    return sum(1 for ref in local if ref.startswith(LOST_PREFIX))


def _tail(local: str, line: int) -> str:
    """What follows ``refs/memstrata/<host>/<agent>/`` for the copy's ref ``local``."""
    return f"{LINE}{line}" if local == DAEMON_REF else LOST + local[len(LOST_PREFIX) :]


def daemon_ref_on_remote(copy: HistoryCopy, host: str, agent: str) -> str:
    """The remote ref the copy's daemon ref is pushed to now (its line)."""
    return remote_prefix(host, agent) + _tail(DAEMON_REF, line_of(local_refs(copy)))


def parse_porcelain(out: str) -> dict[str, tuple[str, str]]:
    """``git push --porcelain``'s ref lines: remote ref -> (flag, summary)."""
    found = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and len(parts[0]) == 1:
            _src, _, dst = parts[1].rpartition(":")
            found[dst] = (parts[0], parts[2])
    return found


def refusal(summary: str) -> str:
    """git's word for a refusal: ``[rejected] (fetch first)`` -> ``fetch first``, ``[remote rejected] (x)`` ->
    ``remote rejected: x``."""
    match = re.match(r"^\[([^\]]*)\]\s*(?:\((.*)\))?", summary)
    if not match:
        return summary
    kind, why = match[1], match[2] or ""
    return why if kind == "rejected" and why else f"{kind}: {why}" if why else kind


# Who the commits memstrata makes itself (a host's report, the shared core) are by.
AUTHOR = {
    "GIT_AUTHOR_NAME": "memstrata",
    "GIT_AUTHOR_EMAIL": "memstrata@localhost",
    "GIT_COMMITTER_NAME": "memstrata",
    "GIT_COMMITTER_EMAIL": "memstrata@localhost",
}


def commit_and_push(
    mirror: HistoryCopy,
    remote: Remote,
    tree: str,
    parent: str | None,
    message: str,
    ref: str,
    local_ref: str,
    source: str,
    cancel: Cancel | None = None,
) -> RefUpdate:
    """A commit of ``tree`` on ``parent`` pushed to the remote's ``ref``, never forced; raises Unreachable.

    Only once the remote took it does ``local_ref`` in ``mirror`` point at it (its directory synced),
    so a refusal (the remote's ref moved: another writer) leaves the local line as it was, and the
    next call builds on what is there.  ``source`` names what was committed, in the answer.
    """
    runner = mirror.runner()
    args = ["commit-tree", tree, *(["-p", parent] if parent else [])]
    sha = runner.with_env(**AUTHOR).run(*args, input=message.encode()).decode().strip()
    git = remote_git(remote, mirror.path, cancel)
    status, out, why = talk(git, remote, "push", "--porcelain", "--no-verify", "--", remote.url, f"{sha}:{ref}")
    answered = parse_porcelain(out.decode(errors="replace"))
    if status != 0 and ref not in answered:
        raise Unreachable(remote.shown, why)
    flag, summary = answered.get(ref, ("!", "[no answer] (the remote did not say)"))
    if flag not in ("*", " ", "="):
        return RefUpdate(source, ref, sha, "refused", refusal(summary))
    runner.run("update-ref", local_ref, sha, killable=False)
    sync_dirs(mirror.path / Path(local_ref).parent, mirror.path / "refs")
    return RefUpdate(source, ref, sha, {"*": "new", " ": "moved", "=": "unchanged"}[flag])


def push(copy: HistoryCopy, remote: Remote, host: str, agent: str) -> Pushed:
    """Push the copy's refs to ``refs/memstrata/<host>/<agent>/``, never forced; what each ref did.

    Raises Unreachable when the remote could not be used at all; a refused ref is in the answer,
    not raised.  Refs the remote acknowledged (moved or already there) are then written down in
    the copy (:func:`behind`).
    """
    prefix = remote_prefix(host, agent)
    local = local_refs(copy)
    if not local:
        return Pushed(remote.shown)
    line = line_of(local)
    wanted = {prefix + _tail(ref, line): (ref, sha) for ref, sha in local.items()}
    specs = [f"{sha}:{dst}" for dst, (_ref, sha) in wanted.items()]
    git = remote_git(remote, copy.path, copy.cancel)
    args = ["push", "--porcelain", "--no-verify", "--no-signed", "--no-follow-tags", "--", remote.url, *specs]
    status, out, why = talk(git, remote, *args)
    answered = parse_porcelain(out.decode(errors="replace"))
    if status != 0 and not answered:
        raise Unreachable(remote.shown, why)
    pushed = pushed_refs(copy, host, agent)
    updates = []
    for dst, (ref, sha) in wanted.items():
        flag, summary = answered.get(dst, ("!", "[no answer] (the remote did not say)"))
        before = pushed.get(dst[len(prefix) :])
        if flag == "=":
            updates.append(RefUpdate(ref, dst, sha, "unchanged"))
        elif flag in ("*", " "):
            found = "" if flag == "*" else summary.partition("..")[0]
            lost = before if before is not None and _lost_by_remote(copy, before, found) else ""
            updates.append(RefUpdate(ref, dst, sha, "new" if flag == "*" else "moved", rewound_from=lost, found=found))
        else:  # '!', and '+'/'-' which no refspec here can cause
            here = ref == DAEMON_REF and before is not None and not _descends(copy, sha, before)
            updates.append(RefUpdate(ref, dst, sha, "refused", refusal(summary), here))
    _write_pushed(copy, host, agent, [u for u in updates if u.status != "refused"], pushed)
    return Pushed(remote.shown, updates)


def _lost_by_remote(copy: HistoryCopy, acknowledged: str, found: str) -> bool:
    """Whether the remote's ref, ``found`` before a push took it forward (git's abbreviation; empty:
    no ref), had lost commits the remote acknowledged at ``acknowledged``.

    Not when it is that commit or a later one of the line: a push the remote took whose
    acknowledgement was not written down here yet (a crash in between) leaves it ahead.
    """
    if found and acknowledged.startswith(found):
        return False
    if not found:
        return True
    status, out = copy.runner().status("rev-parse", "--verify", "--quiet", f"{found}^{{commit}}", fatal=False)
    return status != 0 or not _descends(copy, out.decode().strip(), acknowledged)


def _descends(copy: HistoryCopy, sha: str, ancestor: str) -> bool:
    status, _ = copy.runner().status("merge-base", "--is-ancestor", ancestor, sha, fatal=False)
    return status == 0


def pushed_refs(copy: HistoryCopy, host: str, agent: str) -> dict[str, str]:
    """What the remote last acknowledged, by the name it has there after the agent's prefix:
    ``line/0`` -> sha, ``lost/<x>`` -> sha."""
    prefix = _pushed_prefix(host, agent)
    if not copy.exists:
        return {}
    out = copy.runner().run("for-each-ref", "--format=%(objectname) %(refname)", prefix)
    found = {}
    for line in out.decode(errors="replace").splitlines():
        sha, _, ref = line.partition(" ")
        found[ref[len(prefix) :]] = sha
    return found


def _write_pushed(
    copy: HistoryCopy, host: str, agent: str, acknowledged: list[RefUpdate], before: dict[str, str]
) -> None:
    """Record the acknowledged refs in one ref transaction, then sync the directories it wrote."""
    prefix, there = _pushed_prefix(host, agent), remote_prefix(host, agent)
    tails = [(u.remote[len(there) :], u.sha) for u in acknowledged]
    lines = [f"update {prefix}{tail} {sha}\n" for tail, sha in tails if before.get(tail) != sha]
    if not lines:
        return
    copy.runner().run("update-ref", "--stdin", input="".join(lines).encode(), killable=False)
    root = copy.path / PUSHED_ROOT
    here = root / host / agent
    sync_dirs(here / "line", here / "lost", here, root / host, root, copy.path / "refs")


@dataclass(frozen=True)
class Behind:
    """How far the remote is behind the copy.

    ``commits``: commits of the daemon ref the remote was not acknowledged to have (all of them
    before a first push); ``last_pushed``: the daemon commit it last acknowledged; ``lost``: lost
    histories not acknowledged yet.
    """

    commits: int
    last_pushed: str | None
    head: str | None
    lost: int


def behind(copy: HistoryCopy, host: str, agent: str) -> Behind:
    """What :func:`push` has not delivered yet, from the copy alone (no network).

    ``commits`` counts the daemon ref's commits that no acknowledged ref reaches: after a rewrite
    the new line's commits shared with an older line are not owed again.
    """
    pushed = pushed_refs(copy, host, agent)
    local = local_refs(copy)
    head = local.get(DAEMON_REF)
    last = pushed.get(_tail(DAEMON_REF, line_of(local)))
    count = 0
    if head is not None and head != last:
        known = [sha for sha in dict.fromkeys(pushed.values()) if _has_commit(copy, sha)]
        args = ["rev-list", "--count", head, *(f"^{sha}" for sha in known)]
        count = int(copy.runner().run(*args).decode().strip() or 0)
    line = line_of(local)
    lost = sum(1 for ref, sha in local.items() if ref != DAEMON_REF and pushed.get(_tail(ref, line)) != sha)
    return Behind(count, last, head, lost)


def _has_commit(copy: HistoryCopy, sha: str) -> bool:
    status, _ = copy.runner().status("cat-file", "-e", f"{sha}^{{commit}}", fatal=False)
    return status == 0


# ---------------------------------------------------------------- restore


@dataclass(frozen=True)
class Restored:
    """What :func:`restore` brought back: the daemon's last commit, how many commits and files, lost refs."""

    commit: str
    commits: int
    files: int
    branch: str
    lost: list[str]


def _is_empty_dir(path: Path) -> bool:
    if not os.path.lexists(path):
        return True
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def restore(remote: Remote, host: str, agent: str, copy: HistoryCopy, workspace: Path) -> Restored:
    """Rebuild an agent from the remote: its history copy, then its workspace (files and history).

    ``copy`` must hold no history yet and ``workspace`` must be empty or absent (both refused
    otherwise, nothing touched).  The copy gets the highest ``line/<n>`` as its daemon ref and the
    ``lost/*`` refs as its lost ones (an older line that none of them reaches as a lost ref too), and
    knows the remote has them all: nothing to push; the workspace is a repository
    made as the daemon makes one (``git init``) whose branch is the daemon's last commit, with its
    files checked out.  Raises Unreachable, or NotOnRemote when the remote has no such agent.
    """
    prefix = remote_prefix(host, agent)
    if not _is_empty_dir(workspace):
        raise FileExistsError(f"{workspace} is not empty: a restore writes only into an empty workspace")
    if copy.exists and copy.refs():
        raise FileExistsError(f"the history copy {copy.path} already holds a history: a restore starts from none")
    copy.ensure()
    git = remote_git(remote, copy.path, copy.cancel)
    args = ["fetch", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", "--"]
    args += [remote.url, f"{prefix}*:{_RESTORING}*"]
    status, _out, why = talk(git, remote, *args)
    if status != 0:
        raise Unreachable(remote.shown, why)
    runner = copy.runner()
    out = runner.run("for-each-ref", "--format=%(objectname) %(refname)", _RESTORING).decode()
    fetched = {ref[len(_RESTORING) :]: sha for sha, _, ref in (line.partition(" ") for line in out.splitlines())}
    moves = [f"delete {_RESTORING}{tail} {sha}\n" for tail, sha in fetched.items()]
    lines = {int(t[len(LINE) :]): sha for t, sha in fetched.items() if t.startswith(LINE) and t[len(LINE) :].isdigit()}
    daemon = lines[max(lines)] if lines else None
    kept = {LOST_PREFIX + t[len(LOST) :]: sha for t, sha in fetched.items() if t.startswith(LOST)}
    if daemon is not None:
        pushed = _pushed_prefix(host, agent)
        for number, sha in sorted(lines.items())[:-1]:  # an older line no lost ref reaches: kept as lost too
            if not any(_is_ancestor(runner, sha, tip) for tip in [daemon, *kept.values()]):
                kept[f"{LOST_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-line{number}-{sha[:12]}"] = sha
        moves.append(f"create {DAEMON_REF} {daemon}\n")
        moves += [f"create {ref} {sha}\n" for ref, sha in kept.items()]
        moves += [f"create {pushed}{t} {sha}\n" for t, sha in fetched.items() if t.startswith((LINE, LOST))]
    if moves:
        runner.run("update-ref", "--stdin", input="".join(moves).encode(), killable=False)
    if daemon is None:
        raise NotOnRemote(f"the remote {remote.shown} holds no history under {prefix}")
    sync_tree(copy.path)  # git init synced nothing; fetch synced its pack and refs (core.fsync)
    branch, commits, files = _checkout(copy, daemon, workspace)
    return Restored(daemon, commits, files, branch, sorted(kept))


def _is_ancestor(git: Git, ancestor: str, sha: str) -> bool:
    status, _ = git.status("merge-base", "--is-ancestor", ancestor, sha, fatal=False)
    return status == 0


def _checkout(copy: HistoryCopy, sha: str, workspace: Path) -> tuple[str, int, int]:
    """A new repository in ``workspace`` whose branch is ``sha`` (fetched from the copy), files written."""
    workspace.mkdir(parents=True, exist_ok=True)
    owner = safefs.owner_of(workspace)
    env: dict[str, str | None] = {"GIT_DIR": None, "GIT_WORK_TREE": None, "GIT_INDEX_FILE": None}
    env["GIT_TERMINAL_PROMPT"] = "0"
    Git(["git"], env, workspace, copy.cancel).run("init", "--quiet", "--", str(workspace), killable=False)
    real = os.path.realpath(workspace)
    options = [f"safe.directory={real}", *(f"{k}={v}" for k, v in NEUTRAL_CONFIG)]
    prefix = ["git", f"--git-dir={os.path.join(real, '.git')}", f"--work-tree={real}"]
    git = Git(prefix + [arg for option in options for arg in ("-c", option)], env, workspace, copy.cancel)
    branch = git.run("symbolic-ref", "HEAD").decode().strip()
    git.run("fetch", "--no-tags", "--no-write-fetch-head", "--update-head-ok", "--", str(copy.path), f"{sha}:{branch}")
    git.run("read-tree", "--reset", "-u", "HEAD", killable=False)
    _sync_filesystem(workspace)
    safefs.give_tree(workspace.parent, workspace.name, owner)
    commits = int(git.run("rev-list", "--count", "HEAD").decode().strip())
    files = len(git.run("ls-files", "-z").split(b"\0")) - 1
    return branch, commits, files


def _sync_filesystem(path: Path) -> None:
    """Everything written under ``path`` on disk, with one ``syncfs`` of its file system.

    git syncs objects, refs and the index (core.fsync), never the work tree's files; a restore
    writes thousands of them, and one fsync each took 4.7 s for 1,000 files here, one syncfs 0.04 s.
    Without syncfs (not Linux), ``os.sync``.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)
    sync_dirs(path.parent)
