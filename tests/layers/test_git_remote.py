"""layers/daily/git/remote.py and shared_core.py: the history copy pushed to a central remote (never forced),
how far behind it is, an agent restored from it, the shared core one way.  Real git, bare repositories as
plain paths and file:// URLs, ssh only towards closed or silent ports on 127.0.0.1."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from layers.daily import workspace_repo as daily
from layers.daily.git import remote as fleet
from layers.daily.git import shared_core
from layers.daily.git.history_copy import HistoryCopy

HOST, AGENT = "spoke-1", "main"
REF = f"refs/memstrata/{HOST}/{AGENT}/line/0"


def _git(repo: Path, *args: str, input: bytes | None = None) -> str:
    run = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, check=True)
    return run.stdout.decode()


def _bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    _git(path, "config", "core.logAllRefUpdates", "always")
    return path


def _ref(repo: Path, ref: str) -> str | None:
    run = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", ref], capture_output=True, text=True)
    return run.stdout.strip() or None


def _reflog(repo: Path, ref: str) -> list[tuple[str, str, str]]:
    """(old, new, message) of each update of ``ref`` on the bare remote, oldest first."""
    path = repo / "logs" / ref
    entries = []
    for line in path.read_text().splitlines() if path.exists() else []:
        head, _, message = line.partition("\t")
        old, new = head.split()[:2]
        entries.append((old, new, message))
    return entries


def _forced(repo: Path, ref: str, except_message: str = "") -> int:
    """Updates of ``ref`` on the remote whose new value does not descend from the old one (a forced update)."""
    count = 0
    for old, new, message in _reflog(repo, ref):
        if set(old) == {"0"} or set(new) == {"0"} or (except_message and message == except_message):
            continue
        done = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", old, new], capture_output=True)
        count += done.returncode != 0
    return count


@pytest.fixture
def repo(tmp_path):
    r = daily.WorkspaceRepo(tmp_path / "ws", copy=HistoryCopy(tmp_path / "state" / "history" / f"{AGENT}.git"))
    r.ensure()
    return r


@pytest.fixture
def remote(tmp_path):
    return _bare(tmp_path / "fleet.git")


def _facts(repo, n: int, start: int = 0) -> list[str]:
    shas = []
    for i in range(start, start + n):
        with (repo.path / "MEMORY.md").open("a") as fh:
            fh.write(f"- fact {i}\n")
        shas.append(repo.commit(["MEMORY.md"], f"fact {i}").sha)
    return shas


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- push


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_push_then_a_repush_is_a_no_op_and_a_new_commit_moves_the_ref(repo, remote, as_url):
    shas = _facts(repo, 3)
    target = fleet.Remote(f"file://{remote}" if as_url else str(remote))
    before = fleet.behind(repo.copy, HOST, AGENT)
    assert (before.commits, before.last_pushed, before.head) == (3, None, shas[-1])

    done = fleet.push(repo.copy, target, HOST, AGENT)
    assert done.ok and [(u.remote, u.status, u.sha) for u in done.updates] == [(REF, "new", shas[-1])]
    assert _ref(remote, REF) == shas[-1]
    assert fleet.behind(repo.copy, HOST, AGENT) == fleet.Behind(0, shas[-1], shas[-1], 0)

    again = fleet.push(repo.copy, target, HOST, AGENT)
    assert [u.status for u in again.updates] == ["unchanged"] and not again.moved
    assert len(_reflog(remote, REF)) == 1, "a re-push writes nothing on the remote"

    more = _facts(repo, 2, start=3)
    assert fleet.behind(repo.copy, HOST, AGENT).commits == 2
    moved = fleet.push(repo.copy, target, HOST, AGENT)
    assert [(u.status, u.sha) for u in moved.updates] == [("moved", more[-1])]
    assert _ref(remote, REF) == more[-1] and fleet.behind(repo.copy, HOST, AGENT).commits == 0
    assert _git(remote, "rev-list", "--count", REF).strip() == "5"
    assert _forced(remote, REF) == 0


def test_an_empty_copy_pushes_nothing_and_needs_no_remote(tmp_path):
    copy = HistoryCopy(tmp_path / "nothing.git")
    done = fleet.push(copy, fleet.Remote(str(tmp_path / "no-such-remote")), HOST, AGENT)
    assert done.updates == [] and fleet.behind(copy, HOST, AGENT) == fleet.Behind(0, None, None, 0)


@pytest.mark.parametrize("known_here", [False, True], ids=["fetch-first", "non-fast-forward"])
def test_a_ref_rewritten_on_the_remote_is_refused_and_never_overwritten(repo, remote, known_here):
    target = fleet.Remote(str(remote))
    _facts(repo, 2)
    fleet.push(repo.copy, target, HOST, AGENT)
    # someone rewrites the remote's ref to a commit of their own (force-updates it there)
    tree = _git(remote, "rev-parse", f"{REF}^{{tree}}").strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x"}
    env["GIT_COMMITTER_EMAIL"] = "x@x"
    rewrite = subprocess.run(
        ["git", "-C", str(remote), "commit-tree", tree, "-m", "rewritten"], env=env, capture_output=True, text=True
    ).stdout.strip()
    _git(remote, "update-ref", "-m", "someone rewrote it", REF, rewrite)
    if known_here:  # the copy holds the rewritten commit too: git then says non-fast-forward
        _git(repo.copy.path, "fetch", "-q", str(remote), f"{rewrite}:refs/elsewhere/rewrite")
    ours = _facts(repo, 1, start=2)[-1]

    for _ in range(2):  # refused each time: a refusal is not retried harder
        done = fleet.push(repo.copy, target, HOST, AGENT)
        assert not done.ok and [(u.remote, u.sha, u.status) for u in done.refused] == [(REF, ours, "refused")]
        refused = done.refused[0]
        assert refused.reason == ("non-fast-forward" if known_here else "fetch first") and not refused.rewritten_here
        assert _ref(remote, REF) == rewrite, "the remote's ref is left as they made it"
    assert _reflog(remote, REF)[-1][2] == "someone rewrote it", "nothing written on the remote after the rewrite"
    assert _forced(remote, REF, except_message="someone rewrote it") == 0
    assert fleet.behind(repo.copy, HOST, AGENT).commits == 1, "what was refused is still owed"


def test_a_history_rewritten_here_goes_to_a_new_line_and_the_old_one_is_pushed_as_lost(repo, remote):
    target = fleet.Remote(str(remote))
    shas = _facts(repo, 3)
    fleet.push(repo.copy, target, HOST, AGENT)
    _git(repo.path, "reset", "-q", "--hard", "HEAD~2")
    _git(repo.path, "reflog", "expire", "--expire=now", "--all")
    _git(repo.path, "gc", "-q", "--prune=now")
    assert repo.history_check() is not None  # the copy keeps the old history under refs/lost/
    new = _facts(repo, 1, start=10)[-1]
    assert fleet.behind(repo.copy, HOST, AGENT).commits == 1, "the commits the old line shares are not owed"
    line1 = f"refs/memstrata/{HOST}/{AGENT}/line/1"
    assert fleet.daemon_ref_on_remote(repo.copy, HOST, AGENT) == line1

    done = fleet.push(repo.copy, target, HOST, AGENT)
    assert done.ok
    (daemon,) = [u for u in done.updates if u.local == "refs/heads/daemon"]
    assert (daemon.remote, daemon.status) == (line1, "new")
    (lost,) = [u for u in done.updates if u.local.startswith("refs/lost/")]
    assert lost.status == "new" and lost.remote.startswith(f"refs/memstrata/{HOST}/{AGENT}/lost/")
    assert _ref(remote, lost.remote) == shas[-1] and _ref(remote, REF) == shas[-1] and _ref(remote, line1) == new
    assert fleet.behind(repo.copy, HOST, AGENT) == fleet.Behind(0, new, new, 0)
    assert _forced(remote, REF) == 0 and _forced(remote, line1) == 0

    # a new host restores the newest line; the old one comes back as lost
    copy2, ws2 = HistoryCopy(repo.path.parent / "h2" / "a.git"), repo.path.parent / "h2" / "ws"
    done = fleet.restore(target, HOST, AGENT, copy2, ws2)
    assert done.commit == new and copy2.last() == new and [x.commit.sha for x in copy2.lost()] == [shas[-1]]
    assert fleet.behind(copy2, HOST, AGENT) == fleet.Behind(0, new, new, 0)
    assert fleet.push(copy2, target, HOST, AGENT).moved == []


def test_a_crash_after_the_remote_acknowledged_only_causes_a_no_op_repush(repo, remote):
    target = fleet.Remote(str(remote))
    shas = _facts(repo, 4)
    fleet.push(repo.copy, target, HOST, AGENT)
    # the remote acknowledged, the process died before writing down what it has
    _git(repo.copy.path, "update-ref", "-d", f"refs/pushed/{HOST}/{AGENT}/line/0")
    assert fleet.behind(repo.copy, HOST, AGENT) == fleet.Behind(4, None, shas[-1], 0)
    done = fleet.push(repo.copy, target, HOST, AGENT)
    assert done.ok and [u.status for u in done.updates] == ["unchanged"]
    assert len(_reflog(remote, REF)) == 1 and fleet.behind(repo.copy, HOST, AGENT).commits == 0


@pytest.mark.parametrize("how", ["moved-back", "deleted"])
def test_a_ref_the_remote_moved_back_is_taken_forward_again_and_the_answer_says_so(repo, remote, how):
    target = fleet.Remote(str(remote))
    shas = _facts(repo, 3)
    fleet.push(repo.copy, target, HOST, AGENT)
    if how == "moved-back":  # the hub's root sets it back to an older commit of the line (or an old backup)
        _git(remote, "update-ref", "-m", "moved back", REF, shas[0])
    else:
        _git(remote, "update-ref", "-d", REF)
    ours = _facts(repo, 1, start=3)[-1]

    done = fleet.push(repo.copy, target, HOST, AGENT)
    assert done.ok and _ref(remote, REF) == ours, "a fast-forward of what the remote holds: taken"
    (update,) = done.rewound
    assert update.remote == REF and update.rewound_from == shas[-1] and update.sha == ours
    if how == "moved-back":
        assert update.found and shas[0].startswith(update.found)
    else:
        assert update.found == "", "no ref"
    assert _forced(remote, REF, except_message="moved back") == 0
    assert _git(remote, "rev-list", "--count", REF).strip() == "4", "the commits the remote had lost are back"
    assert fleet.push(repo.copy, target, HOST, AGENT).rewound == [], "said once"


def test_a_remote_ahead_of_what_was_written_down_is_no_rewind(repo, remote):
    target = fleet.Remote(str(remote))
    shas = _facts(repo, 2)
    fleet.push(repo.copy, target, HOST, AGENT)
    more = _facts(repo, 1, start=2)
    # the remote took ``more`` but the process died before writing it down here
    _git(repo.copy.path, "push", "-q", str(remote), f"{more[-1]}:{REF}")
    newest = _facts(repo, 1, start=3)[-1]
    done = fleet.push(repo.copy, target, HOST, AGENT)
    assert done.ok and done.rewound == [] and _ref(remote, REF) == newest and shas


def test_two_hosts_and_two_agents_keep_to_refs_of_their_own(repo, remote, tmp_path):
    target = fleet.Remote(str(remote))
    _facts(repo, 1)
    other = daily.WorkspaceRepo(tmp_path / "ws2", copy=HistoryCopy(tmp_path / "state2" / "b.git"))
    other.ensure()
    _facts(other, 2)
    fleet.push(repo.copy, target, HOST, AGENT)
    fleet.push(other.copy, target, "spoke-2", "b")
    refs = _git(remote, "for-each-ref", "--format=%(refname)").split()
    assert refs == [REF, "refs/memstrata/spoke-2/b/line/0"]
    assert fleet.behind(repo.copy, "spoke-2", AGENT).commits == 1, "pushed state is per host name"


# ---------------------------------------------------------------- unreachable


@pytest.mark.parametrize("url", ["{tmp}/nowhere.git", "file://{tmp}/nowhere.git"])
def test_a_remote_that_does_not_exist_is_unreachable_and_nothing_is_marked_pushed(repo, tmp_path, url):
    _facts(repo, 2)
    with pytest.raises(fleet.Unreachable) as caught:
        fleet.push(repo.copy, fleet.Remote(url.format(tmp=tmp_path)), HOST, AGENT)
    assert "does not appear to be a git repository" in caught.value.reason
    assert fleet.behind(repo.copy, HOST, AGENT).commits == 2


def test_ssh_to_a_closed_port_is_unreachable_and_says_why_without_the_key(repo, tmp_path):
    _facts(repo, 1)
    key = tmp_path / "keys" / "spoke-1"
    key.parent.mkdir()
    kind = "OPENSSH " + "PRIVATE KEY"  # split: this file must not trip the repository's own secret guard
    key.write_text(f"-----BEGIN {kind}-----\nSECRET-KEY-MATERIAL\n-----END {kind}-----\n")
    key.chmod(0o600)
    url = f"ssh://git@127.0.0.1:{_closed_port()}/srv/memstrata/fleet.git"
    target = fleet.Remote(url, key_file=key, known_hosts=tmp_path / "known_hosts", connect_timeout_s=2, timeout_s=60)
    with pytest.raises(fleet.Unreachable) as caught:
        fleet.push(repo.copy, target, HOST, AGENT)
    assert "Connection refused" in caught.value.reason
    assert "SECRET" not in str(caught.value)
    assert fleet.behind(repo.copy, HOST, AGENT).commits == 1


def test_a_silent_server_is_cut_at_the_deadline(repo, tmp_path):
    _facts(repo, 1)
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"ssh://git@127.0.0.1:{silent.getsockname()[1]}/fleet.git"
        target = fleet.Remote(url, known_hosts=tmp_path / "known_hosts", connect_timeout_s=30, timeout_s=2)
        started = time.monotonic()
        with pytest.raises(fleet.Unreachable):
            fleet.push(repo.copy, target, HOST, AGENT)
        assert time.monotonic() - started < 25, "the whole push has a deadline"


def test_a_password_in_the_url_is_never_shown(repo):
    _facts(repo, 1)
    target = fleet.Remote(f"ssh://git:hunter2@127.0.0.1:{_closed_port()}/fleet.git", connect_timeout_s=2)
    with pytest.raises(fleet.Unreachable) as caught:
        fleet.push(repo.copy, target, HOST, AGENT)
    assert "hunter2" not in str(caught.value) and "git:***@127.0.0.1" in str(caught.value)


def test_transports_other_than_file_and_ssh_are_never_used(repo, tmp_path):
    _facts(repo, 1)
    marker = tmp_path / "ran"
    with pytest.raises(fleet.Unreachable):
        fleet.push(repo.copy, fleet.Remote(f"ext::sh -c touch% {marker}"), HOST, AGENT)
    assert not marker.exists()
    with pytest.raises(ValueError):
        fleet.Remote("--upload-pack=touch /tmp/x")


# ---------------------------------------------------------------- names


HOSTILE = ["..", "a/b", "-x", "_x", "Spoke", "a b", "", "x" * 65, "a.b", "a\n", "@{0}", "a:b", "*", "a\\b"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_host_and_agent_names_are_refused_before_anything_runs(repo, remote, name):
    _facts(repo, 1)
    target = fleet.Remote(str(remote))
    for host, agent in ((name, AGENT), (HOST, name)):
        with pytest.raises(fleet.RemoteNameError):
            fleet.push(repo.copy, target, host, agent)
        with pytest.raises(fleet.RemoteNameError):
            fleet.behind(repo.copy, host, agent)
        with pytest.raises(fleet.RemoteNameError):
            fleet.restore(target, host, agent, HistoryCopy(repo.path.parent / "c.git"), repo.path.parent / "w")
    assert _git(remote, "for-each-ref") == "" and not (repo.path.parent / "w").exists()


# ---------------------------------------------------------------- restore


def _fast_import(ws: Path, n: int) -> str:
    """``n`` commits on the workspace's branch in one ``git fast-import``: each adds a note and edits MEMORY.md."""
    out = io.BytesIO()
    for i in range(1, n + 1):
        message = f"note {i}\n".encode()
        note = f"# day {i}\n\n- note {i}: {'x' * (i % 17)}\n".encode()
        memory = "".join(f"- fact {j}\n" for j in range(i % 40)).encode()
        out.write(b"commit refs/heads/master\nmark :%d\n" % i)
        out.write(b"committer memstrata <memstrata@localhost> %d +0000\n" % (1_700_000_000 + 60 * i))
        out.write(b"data %d\n%s" % (len(message), message))
        if i > 1:
            out.write(b"from :%d\n" % (i - 1))
        out.write(b"M 100644 inline memory/n%04d.md\ndata %d\n%s\n" % (i, len(note), note))
        out.write(b"M 100644 inline MEMORY.md\ndata %d\n%s\n" % (len(memory), memory))
    _git(ws, "fast-import", "--quiet", input=out.getvalue())
    _git(ws, "reset", "-q", "--hard", "master")
    return _git(ws, "rev-parse", "HEAD").strip()


def _tree_files(repo: Path, rev: str) -> dict[str, bytes]:
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(data.stdout)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _disk_files(root: Path) -> dict[str, bytes]:
    found = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (dirpath == str(root) and d == ".git")]
        for name in files:
            path = Path(dirpath, name)
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def test_restore_brings_back_every_file_and_every_commit_of_1000(repo, remote, tmp_path):
    subprocess.run(["git", "-C", str(repo.path), "symbolic-ref", "HEAD", "refs/heads/master"], check=True)
    head = _fast_import(repo.path, 1000)
    repo.copy.keep(repo.path / ".git" / "objects", head)
    _git(repo.path, "reset", "-q", "--hard", "HEAD~1")  # a lost history too: it must come back as well
    _git(repo.path, "commit", "-q", "--allow-empty", "-m", "after a reset")
    assert repo.history_check() is not None
    last = repo.copy.last()
    target = fleet.Remote(str(remote))

    started = time.monotonic()
    pushed = fleet.push(repo.copy, target, HOST, AGENT)
    push_s = time.monotonic() - started
    assert pushed.ok and {u.status for u in pushed.updates} == {"new"} and len(pushed.updates) == 2

    copy2, ws2 = HistoryCopy(tmp_path / "new-host" / "history" / f"{AGENT}.git"), tmp_path / "new-host" / "ws"
    started = time.monotonic()
    done = fleet.restore(target, HOST, AGENT, copy2, ws2)
    restore_s = time.monotonic() - started
    print(f"\n1,000 commits: push {push_s:.2f} s, restore {restore_s:.2f} s")

    # 999 imported + the one after the reset; 999 notes and MEMORY.md
    assert done.commit == last and done.commits == 1000 and done.files == 1000
    assert _git(ws2, "rev-list", "HEAD") == _git(repo.path, "rev-list", "HEAD")
    assert _disk_files(ws2) == _tree_files(repo.path, "HEAD"), "every file, byte for byte"
    assert _git(ws2, "symbolic-ref", "HEAD").strip() == done.branch and _git(ws2, "status", "--porcelain") == ""
    assert _git(ws2, "fsck", "--connectivity-only", "--no-progress") == ""
    assert [lost.commit.sha for lost in copy2.lost()] == [head] and copy2.last() == last
    assert _git(copy2.path, "rev-list", "--count", "--all").strip() == "1001"
    assert fleet.behind(copy2, HOST, AGENT) == fleet.Behind(0, last, last, 0), "nothing owed after a restore"

    # the restored agent goes on: the daemon's repository opens it, its next commit is pushed as a fast-forward
    again = daily.WorkspaceRepo(ws2, copy=copy2)
    assert again.head().sha == last and again.history_check() is None
    nxt = _facts(again, 1, start=5000)[-1]
    assert [u.status for u in fleet.push(copy2, target, HOST, AGENT).updates if u.local == "refs/heads/daemon"] == [
        "moved"
    ]
    line1 = f"refs/memstrata/{HOST}/{AGENT}/line/1"  # the history had one rewrite: its second line
    assert fleet.daemon_ref_on_remote(copy2, HOST, AGENT) == line1
    assert _ref(remote, line1) == nxt and _forced(remote, line1) == 0


def test_restore_refuses_a_used_target_and_an_unknown_agent(repo, remote, tmp_path):
    target = fleet.Remote(str(remote))
    _facts(repo, 1)
    fleet.push(repo.copy, target, HOST, AGENT)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "MEMORY.md").write_text("someone's\n")
    with pytest.raises(FileExistsError):
        fleet.restore(target, HOST, AGENT, HistoryCopy(tmp_path / "c1.git"), busy)
    assert (busy / "MEMORY.md").read_text() == "someone's\n" and not (tmp_path / "c1.git").exists()
    with pytest.raises(FileExistsError):  # a copy that already holds a history is not a fresh one
        fleet.restore(target, HOST, AGENT, repo.copy, tmp_path / "w")
    with pytest.raises(fleet.NotOnRemote):
        fleet.restore(target, HOST, "nobody", HistoryCopy(tmp_path / "c2.git"), tmp_path / "w2")
    assert not (tmp_path / "w2").exists() and HistoryCopy(tmp_path / "c2.git").refs() == []
    with pytest.raises(fleet.Unreachable):
        gone = fleet.Remote(str(tmp_path / "gone.git"))
        fleet.restore(gone, HOST, AGENT, HistoryCopy(tmp_path / "c3.git"), tmp_path / "w3")


# ---------------------------------------------------------------- the shared core


def test_the_shared_core_flows_one_way_and_the_last_good_copy_stays(tmp_path, remote):
    hub_dir, spoke_dir = tmp_path / "hub" / "shared", tmp_path / "spoke" / "shared"
    hub_dir.mkdir(parents=True)
    (hub_dir / "rules.md").write_text("# rules\n")
    (hub_dir / "team.md").write_text("# team\n")
    target = fleet.Remote(str(remote))
    hub_mirror, spoke_mirror = tmp_path / "hub" / "mirror.git", tmp_path / "spoke" / "mirror.git"

    first = shared_core.push_shared(hub_dir, target, hub_mirror)
    assert first.status == "new" and _ref(remote, shared_core.SHARED_REF) == first.sha
    assert shared_core.push_shared(hub_dir, target, hub_mirror).status == "unchanged"

    got = shared_core.fetch_shared(target, spoke_mirror, spoke_dir)
    assert got.commit == first.sha and got.changed and got.date.startswith("20")
    assert _disk_files(spoke_dir) == {"rules.md": b"# rules\n", "team.md": b"# team\n"}
    assert not shared_core.fetch_shared(target, spoke_mirror, spoke_dir).changed

    (hub_dir / "team.md").unlink()
    (hub_dir / "rules.md").write_text("# rules, v2\n")
    second = shared_core.push_shared(hub_dir, target, hub_mirror)
    assert second.status == "moved"
    assert shared_core.fetch_shared(target, spoke_mirror, spoke_dir).commit == second.sha
    assert _disk_files(spoke_dir) == {"rules.md": b"# rules, v2\n"}, "a file removed on the hub goes here too"
    assert [p.name for p in spoke_dir.parent.iterdir() if p.name.startswith(".")] == [], "nothing left beside"

    (hub_dir / "new.md").write_text("# new\n")
    (hub_dir / "passwd.md").symlink_to("/etc/passwd")  # a link is never written on a spoke
    shared_core.push_shared(hub_dir, target, hub_mirror)
    remote.rename(tmp_path / "hub-gone.git")  # the hub is away
    with pytest.raises(fleet.Unreachable):
        shared_core.fetch_shared(target, spoke_mirror, spoke_dir)
    assert _disk_files(spoke_dir) == {"rules.md": b"# rules, v2\n"}, "the last good copy stays"
    kept = shared_core.exported(spoke_mirror)
    assert kept is not None and kept.commit == second.sha and kept.date, "which copy, and how old"
    (tmp_path / "hub-gone.git").rename(remote)  # back: the next fetch brings what was pushed meanwhile
    third = shared_core.fetch_shared(target, spoke_mirror, spoke_dir)
    assert third.changed and third.skipped == ("passwd.md",)
    assert _disk_files(spoke_dir) == {"rules.md": b"# rules, v2\n", "new.md": b"# new\n"}
    assert not os.path.lexists(spoke_dir / "passwd.md")
    assert _forced(remote, shared_core.SHARED_REF) == 0


def test_a_spoke_with_no_shared_core_on_the_remote_is_told_so(tmp_path, remote):
    with pytest.raises(fleet.NotOnRemote):
        shared_core.fetch_shared(fleet.Remote(str(remote)), tmp_path / "m.git", tmp_path / "shared")
    assert not (tmp_path / "shared").exists() and shared_core.exported(tmp_path / "m.git") is None


def test_a_spokes_copy_is_read_only_its_edits_are_found_locally_and_written_back(tmp_path, remote):
    hub_dir, spoke_dir = tmp_path / "hub" / "shared", tmp_path / "spoke" / "shared"
    hub_dir.mkdir(parents=True)
    (hub_dir / "rules.md").write_text("# rules\n")
    (hub_dir / "secret.md").write_text("a secret\n")
    target = fleet.Remote(str(remote))
    hub_mirror, spoke_mirror = tmp_path / "hub" / "mirror.git", tmp_path / "spoke" / "mirror.git"
    local = shared_core.content_tree(hub_dir, hub_mirror, held_back=["secret.md"])
    pushed = shared_core.push_shared(hub_dir, target, hub_mirror, held_back=["secret.md"])
    assert _git(remote, "rev-parse", f"{pushed.sha}^{{tree}}").strip() == local, "the local tree is what is pushed"
    assert _git(remote, "ls-tree", "--name-only", pushed.sha).split() == ["rules.md"], "a held-back file stays home"
    assert shared_core.local_edits(spoke_dir, spoke_mirror) is None, "nothing exported yet"

    shared_core.fetch_shared(target, spoke_mirror, spoke_dir, read_only=True)
    assert (spoke_dir / "rules.md").stat().st_mode & 0o777 == 0o444
    assert shared_core.local_edits(spoke_dir, spoke_mirror) == []
    (spoke_dir / "rules.md").chmod(0o644)
    (spoke_dir / "rules.md").write_text("# my rules\n")
    (spoke_dir / "mine.md").write_text("mine\n")
    assert shared_core.local_edits(spoke_dir, spoke_mirror) == ["mine.md", "rules.md"]
    back = shared_core.reexport(spoke_mirror, spoke_dir, read_only=True)
    assert back is not None and back.commit == pushed.sha
    assert (
        _disk_files(spoke_dir) == {"rules.md": b"# rules\n"} and shared_core.local_edits(spoke_dir, spoke_mirror) == []
    )
    assert not shared_core.fetch_shared(target, spoke_mirror, spoke_dir).changed


# ---------------------------------------------------------------- the host's report


def test_a_hosts_reports_are_a_line_and_a_second_host_under_its_name_is_refused(tmp_path, remote):
    from layers.daily.git import host_report

    target = fleet.Remote(str(remote))
    ref = host_report.report_ref(HOST)
    first = host_report.push_report(target, tmp_path / "a" / "report.git", HOST, b'{"n": 1}\n')
    second = host_report.push_report(target, tmp_path / "a" / "report.git", HOST, b'{"n": 2}\n')
    assert (first.status, second.status) == ("new", "moved") and _ref(remote, ref) == second.sha
    assert _git(remote, "rev-parse", f"{second.sha}^").strip() == first.sha, "each report the child of the last"
    assert _git(remote, "show", f"{ref}:status.json") == '{"n": 2}\n'
    # a host rebuilt under the name (a fresh state directory) goes on from the remote's last report...
    other = host_report.push_report(target, tmp_path / "b" / "report.git", HOST, b'{"n": 3}\n')
    assert other.status == "moved" and _git(remote, "rev-parse", f"{other.sha}^").strip() == second.sha
    # ...and the first one, still running, is refused: two hosts under one name are never merged
    again = host_report.push_report(target, tmp_path / "a" / "report.git", HOST, b'{"n": 4}\n')
    assert again.status == "refused" and _ref(remote, ref) == other.sha and _forced(remote, ref) == 0
    with pytest.raises(fleet.RemoteNameError):
        host_report.report_ref("../x")
