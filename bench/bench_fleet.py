"""The fleet bench (issue 47's targets) on the three booted hosts of tests/system/fleet.py.

The hub serves the fleet's repository over ssh; each spoke runs memstrata.service as installed, two
agents each, ``git.remote`` set to the hub with the spoke's own key and ``push_retry_max_s`` small.
Six phases, in this order, each printing counts and ratios against its own baseline (nothing is
asserted):

1. **Flaps.**  ``--flaps`` link flaps per spoke (down 0.5-10 s, up 1-5 s, drawn from ``--seed``)
   while every agent writes a note about every 2 s; then, links up, the backlog drains and every
   commit of every history copy (``rev-list --all``) is looked up on the hub: missing, the agent's
   ref on the hub against the copy's daemon ref, the notes written against the notes on the hub.
2. **Latency.**  Link up, one note at a time: note written -> commit in the workspace (local) and
   note written -> the hub's ref holds it (hub); target hub <= 2 x local + 5 s, per note.
3. **Backlog drain.**  Both spokes cut; ``--backlog`` notes per agent, each waited for until the
   daemon committed it (the 1-hour outage's one note a minute, made quickly); links restored: the
   time until the hub has every agent's copy.  Target < 60 s.
4. **Rewritten ref.**  As root on the hub, ``git update-ref`` of a spoke's agent ref: first to an
   ancestor (the next push is a fast-forward of it, and the spoke's status says REWOUND), then to a
   commit of its own that does not descend from the spoke's history; the spoke commits: the hub's
   ref is kept, status says REFUSED.
5. **Restore.**  ``--commits`` commits made with git fast-import into an agent's workspace (the
   daemon stopped), copied into its history copy as the daemon does after a commit (the copy's
   ``refs/heads/daemon`` moved to the workspace's HEAD, a fast-forward); the daemon started pushes
   them.  The host is then wiped (its state directory and its openclaw root: every workspace, history
   copy and index; /etc/memstrata kept, as an operator puts configuration and key back), ``memstrata
   install`` run again, and ``memstrata agent restore-from-remote``: files (path, mode, blob, content)
   and commits compared.
6. **Idle RSS.**  spoke-1's daemon restarted with ``git.remote`` unset, then set, ``--idle`` seconds
   idle each time: VmRSS of its main process (and its children).  Target growth <= 10 MB.

Forced updates are counted at the end over every ref's reflog in every repository on the hub
(``core.logAllRefUpdates=always``, set by ``init-remote``): an update whose new value does not
descend from its old one.  The bench's own rewrites (phase 4, reflog message ``bench: ...``) are
counted apart.  The daemon's ``git.quiet_period_s`` is set to ``--quiet`` (1 s) so a note every
2 s is a commit each rather than one a minute (``max_delay_s``).  Root only (nspawn, namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.system import operator
from tests.system.container import ContainerError
from tests.system.fleet import HUB, KEY, REMOTE, REMOTE_PATH, SPOKES, Fleet
from tests.system.rootfs import ensure_rootfs

FLAPS = 100
AGENTS = {"spoke-1": ("agent-c", "agent-e"), "spoke-2": ("agent-d", "agent-f")}
HISTORY = "/var/lib/memstrata/history"
MARK = "# bench-fleet"  # on every configuration line the bench adds
RESTORE_ROLE, RESTORE_AGENT = "spoke-2", "agent-d"
RSS_ROLE = "spoke-1"
REWRITE_ROLE, REWRITE_AGENT = "spoke-1", "agent-c"

# Runs on the hub (/usr/bin/python3): every reflog line of every repository, forced or not.
_REFLOG_SCRIPT = r"""
import glob, json, os, subprocess, sys
top = sys.argv[1]
out = {}
for repo in [top] + sorted(glob.glob(os.path.join(top, "hosts", "*.git"))):
    logs = os.path.join(repo, "logs")
    c = {"updates": 0, "created": 0, "deleted": 0, "forced": [], "bench": 0, "unknown": 0}
    for dirpath, _, names in os.walk(logs):
        for name in names:
            path = os.path.join(dirpath, name)
            ref = os.path.relpath(path, logs)
            for line in open(path, errors="replace"):
                head, _, msg = line.rstrip("\n").partition("\t")
                old, new = head.split()[:2]
                if set(old) == {"0"}:
                    c["created"] += 1
                    continue
                if set(new) == {"0"}:
                    c["deleted"] += 1
                    continue
                c["updates"] += 1
                rc = subprocess.run(["git", "--git-dir", repo, "merge-base", "--is-ancestor", old, new]).returncode
                if rc == 0:
                    continue
                if msg.startswith("bench:"):
                    c["bench"] += 1
                elif rc == 1:
                    c["forced"].append(f"{ref} {old[:10]}..{new[:10]} {msg}")
                else:
                    c["unknown"] += 1
    out[os.path.relpath(repo, top)] = c
print(json.dumps(out))
"""

# Runs on a spoke: COUNT commits on top of the workspace's HEAD, as fast-import makes them, then the
# worktree checked out and the history copy's daemon ref moved to them (a fast-forward).
_IMPORT_SCRIPT = r"""
import subprocess, sys, time
ws, copy, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
git = lambda *a, **k: subprocess.run(["git", *a], check=True, capture_output=True, text=True, **k).stdout.strip()
branch = git("-C", ws, "symbolic-ref", "HEAD")
head = git("-C", ws, "rev-parse", "HEAD")
assert git("--git-dir", copy, "rev-parse", "refs/heads/daemon") == head, "the copy is not at the workspace's HEAD"
files = {}
parts = []
now = int(time.time()) - count
for i in range(count):
    path = f"memory/bulk/{i % 100:03d}.md"
    files[path] = files.get(path, f"# bulk {i % 100}\n\n") + f"- line {i}: a note the bench made\n"
    body = files[path].encode()
    msg = f"memstrata: memory/bulk {i}\n".encode()
    stamp = f"memstrata <memstrata@localhost> {now + i} +0000"
    parts.append(f"commit {branch}\nauthor {stamp}\ncommitter {stamp}\ndata {len(msg)}\n".encode() + msg)
    if i == 0:
        parts.append(f"from {head}\n".encode())
    parts.append(f"M 100644 inline {path}\ndata {len(body)}\n".encode() + body + b"\n")
subprocess.run(["git", "-C", ws, "fast-import", "--quiet"], input=b"".join(parts), check=True)
git("-C", ws, "reset", "-q", "--hard", "HEAD")
new = git("-C", ws, "rev-parse", "HEAD")
git("--git-dir", copy, "fetch", "-q", "--no-tags", ws, f"{new}:refs/bench/import")
git("--git-dir", copy, "update-ref", "-m", "bench: fast-import", "refs/heads/daemon", new, head)
git("--git-dir", copy, "update-ref", "-d", "refs/bench/import")
print(new)
"""


class Bench:
    def __init__(self, fleet: Fleet, quiet_s: float, seed: int) -> None:
        self.f = fleet
        self.quiet_s = quiet_s
        self.seed = seed
        self.serial = 0
        self.lock = threading.Lock()
        self.notes: dict[tuple[str, str], list[str]] = {(r, a): [] for r in SPOKES for a in AGENTS[r]}

    # ------------------------------------------------------------ setup

    def setup(self) -> None:
        def one(role: str) -> None:
            self.f.install(role, AGENTS[role])
            self.configure(role, remote=True)

        self.f.each(one, SPOKES)

    def configure(self, role: str, remote: bool) -> None:
        """The spoke's configuration: quiet period ``quiet_s``, ``git.remote`` set or not; restarted."""
        c = self.f.container(role)
        text = "\n".join(line for line in c.read(operator.CONFIG).splitlines() if MARK not in line) + "\n"
        text = re.sub(r"^  quiet_period_s: .*$", f"  quiet_period_s: {self.quiet_s}  {MARK}", text, flags=re.M)
        if remote:
            lines = [f"  remote: {REMOTE}", f"  remote_key_file: {KEY}", "  push_retry_max_s: 5"]
            text = text.replace("\ngit:\n", "\ngit:\n" + "".join(f"{line}  {MARK}\n" for line in lines), 1)
        mode = int(c.run("stat", "-c", "%a", operator.CONFIG).stdout.strip(), 8)
        c.write(operator.CONFIG, text, mode=mode)
        c.run("systemctl", "restart", "memstrata.service", timeout=240)

    # ------------------------------------------------------------ reading

    def ws(self, agent: str) -> str:
        return f"{operator.AGENTS}/{agent}-workspace"

    def write_note(self, role: str, agent: str, tag: str) -> str:
        with self.lock:
            self.serial += 1
            name = f"memory/{tag}-{self.serial:06d}.md"
        self.f.run(
            role,
            "/bin/sh",
            "-c",
            f"cat > {shlex.quote(self.ws(agent) + '/' + name)}",
            input=f"# {tag}\n\n- note {self.serial} by {agent} on {role}\n",
        )
        self.notes[(role, agent)].append(name)
        return name

    def committed(self, role: str, agent: str, name: str) -> str:
        """The commit that added ``name`` in the workspace ('' while none has)."""
        out = self.f.run(role, "git", "-C", self.ws(agent), "log", "-1", "--format=%H", "--", name, check=False)
        return out.stdout.strip()

    def copy_head(self, role: str, agent: str) -> str:
        run = self.f.run(
            role,
            "git",
            "--git-dir",
            f"{HISTORY}/{agent}.git",
            "rev-parse",
            "-q",
            "--verify",
            "refs/heads/daemon",
            check=False,
        )
        return run.stdout.strip()

    def hub_lines(self, role: str, agent: str) -> dict[str, str]:
        """``line/<n>`` and ``lost/<x>`` refs of the agent on the hub: {ref tail: sha}."""
        prefix = f"refs/memstrata/{role}/{agent}/"
        out = self.f.run(
            HUB,
            "git",
            "--git-dir",
            repo(role),
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            prefix,
            check=False,
        ).stdout
        return {ref[len(prefix) :]: sha for sha, ref in (line.split() for line in out.splitlines())}

    def hub_head(self, role: str, agent: str) -> str:
        lines = {int(k.split("/")[1]): v for k, v in self.hub_lines(role, agent).items() if k.startswith("line/")}
        return lines[max(lines)] if lines else ""

    def on_hub(self, role: str, agent: str, commit: str) -> bool:
        head = self.hub_head(role, agent)
        if not head:
            return False
        is_anc = self.f.run(
            HUB, "git", "--git-dir", repo(role), "merge-base", "--is-ancestor", commit, head, check=False
        )
        return is_anc.returncode == 0

    def synced(self, role: str, agent: str) -> bool:
        head = self.copy_head(role, agent)
        return bool(head) and self.hub_head(role, agent) == head

    def rev_list(self, role: str, git_dir: str) -> set[str]:
        return set(self.f.run(role, "git", "--git-dir", git_dir, "rev-list", "--all", timeout=300).stdout.split())

    def sync_status(self, role: str) -> dict:
        return operator.status(self.f.container(role))["sync"]

    def rss_kb(self, role: str) -> tuple[int, int]:
        """VmRSS of the daemon's main process, and of it with its children, in kB."""
        c = self.f.container(role)
        pid = operator.main_pid(c)
        main = int(re.search(r"VmRSS:\s+(\d+)", c.read(f"/proc/{pid}/status"))[1])  # type: ignore[index]
        kids = c.run("ps", "-o", "rss=", "--ppid", str(pid), check=False).stdout.split()
        return main, main + sum(int(k) for k in kids)

    def forced(self) -> dict:
        self.f.container(HUB).write("/root/bench-reflogs.py", _REFLOG_SCRIPT)
        out = self.f.run(HUB, "/usr/bin/python3", "/root/bench-reflogs.py", REMOTE_PATH, timeout=600).stdout
        return json.loads(out)


def repo(role: str) -> str:
    return f"{REMOTE_PATH}/hosts/{role}.git"


def poll(check, timeout: float, interval: float = 0.2):
    """``check()`` until truthy; its value, or None at the deadline (a bench counts, it does not fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (ContainerError, subprocess.TimeoutExpired, KeyError, ValueError):
            pass
        time.sleep(interval)
    return None


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ------------------------------------------------------------ phases


def flaps(b: Bench, count: int) -> None:
    stop = threading.Event()
    downs: list[float] = []
    errors: list[str] = []

    def writer(role: str, agent: str, rng: random.Random) -> None:
        while not stop.is_set():
            try:
                b.write_note(role, agent, "flap")
            except (ContainerError, subprocess.TimeoutExpired) as error:
                errors.append(f"{role}/{agent}: {error}"[:200])
            stop.wait(rng.uniform(1.5, 2.5))

    def flapper(role: str, rng: random.Random) -> None:
        for _ in range(count):
            down = rng.uniform(0.5, 10)
            b.f.cut(role)
            time.sleep(down)
            b.f.restore(role)
            downs.append(down)
            time.sleep(rng.uniform(1, 5))

    rng = random.Random(b.seed)
    writers = [
        threading.Thread(target=writer, args=(r, a, random.Random(rng.random()))) for r in SPOKES for a in AGENTS[r]
    ]
    flappers = [threading.Thread(target=flapper, args=(r, random.Random(rng.random()))) for r in SPOKES]
    started = time.monotonic()
    for t in writers + flappers:
        t.start()
    for t in flappers:
        t.join()
    stop.set()
    for t in writers:
        t.join()
    flapped = time.monotonic() - started
    written = sum(len(v) for v in b.notes.values())

    drain_started = time.monotonic()

    def drained() -> bool:
        for (role, agent), names in b.notes.items():
            if names and not b.committed(role, agent, names[-1]):
                return False
            if not b.synced(role, agent):
                return False
        return True

    done = poll(drained, 600, interval=1.0)
    drain = time.monotonic() - drain_started
    print(
        f"flaps: {count} per spoke ({len(downs)} in all, down {sum(downs):.0f} s in all, "
        f"mean {statistics.mean(downs):.1f} s), {flapped:.0f} s; {written} notes written, "
        f"{len(errors)} write errors; drained "
        f"{'in' if done else 'NOT within'} {drain:.1f} s after the last flap"
    )
    totals = {"commits": 0, "missing": 0, "ref_differs": 0, "notes_missing": 0}
    for role in SPOKES:
        hub_all = b.rev_list(HUB, repo(role))
        for agent in AGENTS[role]:
            copy = b.rev_list(role, f"{HISTORY}/{agent}.git")
            missing = copy - hub_all
            head = b.copy_head(role, agent)
            hub_refs = b.hub_lines(role, agent)
            same = b.hub_head(role, agent) == head
            tree = set(
                b.f.run(
                    HUB,
                    "git",
                    "--git-dir",
                    repo(role),
                    "ls-tree",
                    "-r",
                    "--name-only",
                    b.hub_head(role, agent) or "HEAD",
                    "memory/",
                    check=False,
                ).stdout.split()
            )
            lost_notes = [n for n in b.notes[(role, agent)] if n not in tree]
            totals["commits"] += len(copy)
            totals["missing"] += len(missing)
            totals["ref_differs"] += 0 if same else 1
            totals["notes_missing"] += len(lost_notes)
            print(
                f"  {role}/{agent}: copy {len(copy)} commits, {len(missing)} not on the hub; hub ref "
                f"{'=' if same else '!='} copy's daemon ref; hub refs {sorted(hub_refs)}; notes "
                f"{len(b.notes[(role, agent)])} written, {len(lost_notes)} not in the hub's tree"
            )
    fsck = {}
    for role in SPOKES:
        run = b.f.run(HUB, "git", "--git-dir", repo(role), "fsck", "--no-dangling", check=False, timeout=600)
        fsck[role] = "clean" if run.returncode == 0 and not run.stdout.strip() else (run.stdout + run.stderr)[:300]
    print(
        f"flaps total: {totals['commits']} commits in the copies, {totals['missing']} missing on the hub, "
        f"{totals['ref_differs']} agent refs differing, {totals['notes_missing']} notes missing; hub fsck {fsck}"
    )


def latency(b: Bench, notes: int) -> None:
    rows: list[tuple[float, float]] = []

    def one(role: str) -> None:
        for i in range(notes):
            agent = AGENTS[role][i % 2]
            t0 = time.monotonic()
            name = b.write_note(role, agent, "latency")
            commit = poll(lambda a=agent, n=name: b.committed(role, a, n), 120, interval=0.1)
            local = time.monotonic() - t0
            if not commit:
                print(f"  {role}/{agent}: {name} not committed within 120 s")
                continue
            arrived = poll(lambda a=agent, c=commit: b.on_hub(role, a, c), 180, interval=0.1)
            hub = time.monotonic() - t0
            if not arrived:
                print(f"  {role}/{agent}: {commit[:10]} not on the hub within 180 s")
                continue
            with b.lock:
                rows.append((local, hub))
            time.sleep(1)

    b.f.each(one, SPOKES)
    local = [r[0] for r in rows]
    hub = [r[1] for r in rows]
    within = sum(1 for lo, h in rows if h <= 2 * lo + 5)
    print(
        f"latency: {len(rows)} notes; local commit p50 {pct(local, 0.5):.2f} s p95 {pct(local, 0.95):.2f} s; "
        f"hub p50 {pct(hub, 0.5):.2f} s p95 {pct(hub, 0.95):.2f} s; "
        f"hub/local p50 {pct(hub, 0.5) / pct(local, 0.5):.2f}; "
        f"target (hub <= 2 x local + 5 s) met by {within}/{len(rows)} notes; worst margin "
        f"{max((h - (2 * lo + 5) for lo, h in rows), default=float('nan')):+.2f} s"
    )


def backlog(b: Bench, per_agent: int) -> None:
    for role in SPOKES:
        poll(lambda role=role: all(b.synced(role, a) for a in AGENTS[role]), 120, interval=1.0)
    before = {(r, a): b.hub_head(r, a) for r in SPOKES for a in AGENTS[r]}
    for role in SPOKES:
        b.f.cut(role)
    started = time.monotonic()
    slow: list[str] = []

    def agent_notes(pair: tuple[str, str]) -> None:
        role, agent = pair
        for _ in range(per_agent):
            name = b.write_note(role, agent, "outage")
            if not poll(lambda n=name: b.committed(role, agent, n), 120, interval=0.2):
                slow.append(name)

    pairs = [(r, a) for r in SPOKES for a in AGENTS[r]]
    threads = [threading.Thread(target=agent_notes, args=(p,)) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = time.monotonic() - started
    counts = {}
    for role, agent in pairs:
        out = b.f.run(
            role,
            "git",
            "--git-dir",
            f"{HISTORY}/{agent}.git",
            "rev-list",
            "--count",
            f"{before[(role, agent)]}..refs/heads/daemon",
        ).stdout
        counts[f"{role}/{agent}"] = int(out)
    behind = {r: [a["behind_commits"] for a in b.sync_status(r)["agents"]] for r in SPOKES}
    held = sum(1 for r, a in pairs if b.hub_head(r, a) == before[(r, a)])
    t0 = time.monotonic()
    for role in SPOKES:
        b.f.restore(role)
    firsts: dict[str, float] = {}

    def all_there() -> bool:
        for role, agent in pairs:
            key = f"{role}/{agent}"
            if key not in firsts:
                if not b.synced(role, agent):
                    continue
                firsts[key] = time.monotonic() - t0
        return len(firsts) == len(pairs)

    ok = poll(all_there, 600, interval=0.2)
    took = time.monotonic() - t0
    print(
        f"backlog: both spokes cut, {per_agent} notes per agent made in {made:.0f} s ({len(slow)} not committed "
        f"within 120 s); daemon commits in the copies while cut {counts}; status behind_commits {behind}; "
        f"hub unchanged while cut for {held}/{len(pairs)} agents"
    )
    print(
        f"backlog drain: {'everything on the hub' if ok else 'NOT drained'} {took:.1f} s after the links came back "
        f"(target < 60 s, ratio {took / 60:.2f}); per agent {json.dumps({k: round(v, 1) for k, v in firsts.items()})}"
    )


def rewritten(b: Bench) -> None:
    role, agent = REWRITE_ROLE, REWRITE_AGENT
    ref = f"refs/memstrata/{role}/{agent}/line/0"
    poll(lambda: b.synced(role, agent), 120, interval=0.5)
    head = b.hub_head(role, agent)
    hub = b.f.container(HUB)
    git = ["git", "--git-dir", repo(role)]
    older = hub.run(*git, "rev-parse", f"{head}~3").stdout.strip()
    # (a) back to an ancestor: the spoke's next push is a fast-forward of the rewritten ref
    hub.run(*git, "update-ref", "-m", "bench: rewritten to an ancestor", ref, older, head)
    name = b.write_note(role, agent, "rewrite-a")
    commit = poll(lambda: b.committed(role, agent, name), 120)
    arrived = poll(lambda: b.hub_head(role, agent) == commit, 90, interval=0.5)
    told = poll(lambda: "REWOUND" in operator.memstrata(b.f.container(role), "status").stdout, 30, interval=1.0)
    print(
        f"rewritten (a): hub ref moved back 3 commits by root; the spoke's next commit "
        f"{'fast-forwarded it (it descends from the ancestor)' if arrived else 'did NOT reach the hub'}; "
        f"the spoke's status {'says REWOUND' if told else 'does NOT say REWOUND'}"
    )
    # (b) to a commit of the hub's own, not in the spoke's history: the spoke can only be refused
    base = b.hub_head(role, agent)
    parent = hub.run(*git, "rev-parse", f"{base}~2").stdout.strip()
    own = hub.run(
        *git,
        "commit-tree",
        f"{parent}^{{tree}}",
        "-p",
        parent,
        "-m",
        "rewritten on the hub",
        env={
            "GIT_AUTHOR_NAME": "x",
            "GIT_AUTHOR_EMAIL": "x@hub",
            "GIT_COMMITTER_NAME": "x",
            "GIT_COMMITTER_EMAIL": "x@hub",
        },
    ).stdout.strip()
    hub.run(*git, "update-ref", "-m", "bench: rewritten to a commit of its own", ref, own, base)
    kept = 0
    tries = 3
    for _ in range(tries):
        name = b.write_note(role, agent, "rewrite-b")
        poll(lambda n=name: b.committed(role, agent, n), 120)
        text = ""

        def refused() -> bool:
            nonlocal text
            text = operator.memstrata(b.f.container(role), "status").stdout
            return "REFUSED" in text and agent in text

        said = poll(refused, 90, interval=1.0)
        time.sleep(3)
        kept += b.hub_head(role, agent) == own
    lines = text.splitlines()
    at = next((i for i, ln in enumerate(lines) if "REFUSED" in ln), None)
    line = " ".join(ln.strip() for ln in lines[at : at + 2]) if at is not None else "(no REFUSED line)"
    agent_status = next(a for a in b.sync_status(role)["agents"] if a["id"] == agent)
    print(
        f"rewritten (b): hub ref set by root to a commit not in the spoke's history; {tries} commits on the spoke: "
        f"hub ref kept {kept}/{tries}, status says REFUSED: {bool(said)}; behind_commits "
        f"{agent_status['behind_commits']}, refused {len(agent_status['refused'])}\n  {line.strip()[:240]}"
    )


def restore(b: Bench, commits: int) -> None:
    role, agent = RESTORE_ROLE, RESTORE_AGENT
    c = b.f.container(role)
    ws = b.ws(agent)
    copy = f"{HISTORY}/{agent}.git"
    poll(lambda: b.synced(role, agent), 120, interval=0.5)
    c.run("systemctl", "stop", "memstrata.service", timeout=240)
    c.write("/root/bench-import.py", _IMPORT_SCRIPT)
    t0 = time.monotonic()
    new = c.run("/usr/bin/python3", "/root/bench-import.py", ws, copy, str(commits), timeout=600).stdout.strip()
    made = time.monotonic() - t0
    c.run("systemctl", "start", "memstrata.service", timeout=240)
    t0 = time.monotonic()
    pushed = poll(lambda: b.hub_head(role, agent) == new, 600, interval=0.5)
    push_took = time.monotonic() - t0
    files_before = workspace_files(c, ws)
    commits_before = c.run("git", "-C", ws, "rev-list", "HEAD").stdout.split()
    copy_before = b.rev_list(role, copy)
    # the host wiped: its state directory (history copies, L4, the pusher's records), the openclaw root (every
    # workspace, every L3 index); /etc/memstrata (configuration, the host's key) kept, as an operator puts
    # them back on a new host; then `memstrata install` again as on a fresh host
    c.run("systemctl", "stop", "memstrata.service", timeout=240)
    c.sh(f"rm -rf /var/lib/memstrata {operator.ROOT}")
    operator.install(c)
    t0 = time.monotonic()
    run = operator.memstrata(c, "agent", "restore-from-remote", agent, "--json", check=False, timeout=900)
    took = time.monotonic() - t0
    answer = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {"error": run.stderr[-300:]}
    files_after = workspace_files(c, ws)
    commits_after = c.run("git", "-C", ws, "rev-list", "HEAD", check=False).stdout.split()
    copy_after = b.rev_list(role, copy) if c.run("test", "-d", copy, check=False).returncode == 0 else set()
    c.run("systemctl", "start", "memstrata.service", timeout=240)
    time.sleep(10)
    kept = b.hub_head(role, agent) == new
    same_files = sum(1 for path, entry in files_before.items() if files_after.get(path) == entry)
    print(
        f"restore: {commits} commits made by fast-import in {made:.1f} s (workspace HEAD {new[:10]}), pushed by the "
        f"daemon {'in' if pushed else 'NOT within'} {push_took:.1f} s after its start"
    )
    print(
        f"restore-from-remote on the wiped host: exit {run.returncode} in {took:.1f} s; files {same_files}/"
        f"{len(files_before)} identical "
        f"(path, mode, blob, content sha256); workspace commits {len(set(commits_after) & set(commits_before))}/"
        f"{len(commits_before)} ({len(commits_after)} after); history copy {len(copy_after & copy_before)}/"
        f"{len(copy_before)} commits; answer "
        f"{json.dumps({k: answer.get(k) for k in ('commits', 'files', 'lost', 'error')})[:300]}; hub ref "
        f"{'unchanged' if kept else 'CHANGED'} 10 s after the daemon's start"
    )


def workspace_files(c, ws: str) -> dict[str, tuple[str, str]]:
    """Every file of the workspace's HEAD: {path: (mode, type and blob from ls-tree; sha256 of the file on disk)}."""
    tree = c.run("git", "-C", ws, "ls-tree", "-r", "HEAD", check=False).stdout
    disk = c.sh(f"cd {shlex.quote(ws)} && git ls-files -z | xargs -0 -r sha256sum", check=False).stdout
    sums = {line[66:]: line[:64] for line in disk.splitlines() if len(line) > 66}
    entries = {}
    for line in tree.splitlines():
        meta, _, path = line.partition("\t")
        entries[path] = (meta, sums.get(path, "missing on disk"))
    return entries


def idle_rss(b: Bench, idle_s: float) -> None:
    role = RSS_ROLE
    figures = {}
    for remote in (False, True):
        b.configure(role, remote=remote)
        time.sleep(idle_s)
        figures[remote] = b.rss_kb(role)
    (off, off_all), (on, on_all) = figures[False], figures[True]
    print(
        f"idle RSS ({role}, {len(AGENTS[role])} agents, {idle_s:.0f} s after start): git.remote unset "
        f"{off / 1024:.1f} MB, set {on / 1024:.1f} MB, growth {(on - off) / 1024:+.1f} MB (target <= 10 MB); "
        f"with children {off_all / 1024:.1f} -> {on_all / 1024:.1f} MB ({(on_all - off_all) / 1024:+.1f} MB)"
    )


def main(
    quick: bool = False,
    flap_count: int | None = None,
    notes: int | None = None,
    backlog_notes: int | None = None,
    commits: int | None = None,
    idle_s: float | None = None,
    quiet_s: float = 1.0,
    seed: int = 47,
) -> None:
    if os.geteuid() != 0 or not shutil.which("systemd-nspawn"):
        print("skipped: root and systemd-nspawn needed (the booted fleet)")
        return
    flap_count = flap_count if flap_count is not None else (10 if quick else FLAPS)
    notes = notes if notes is not None else (5 if quick else 20)
    backlog_notes = backlog_notes if backlog_notes is not None else (20 if quick else 60)
    commits = commits if commits is not None else 1000
    idle_s = idle_s if idle_s is not None else (20 if quick else 60)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, Fleet(ensure_rootfs(), Path(tmp)) as fleet:
        b = Bench(fleet, quiet_s, seed)
        b.setup()
        print(
            f"fleet booted and installed in {time.monotonic() - started:.0f} s; agents {AGENTS}; quiet_period_s "
            f"{quiet_s}, push_retry_max_s 5, seed {seed}",
            flush=True,
        )
        for phase, run in (
            ("flaps", lambda: flaps(b, flap_count)),
            ("latency", lambda: latency(b, notes)),
            ("backlog", lambda: backlog(b, backlog_notes)),
            ("rewritten", lambda: rewritten(b)),
            ("restore", lambda: restore(b, commits)),
            ("idle RSS", lambda: idle_rss(b, idle_s)),
        ):
            t0 = time.monotonic()
            try:
                run()
            except Exception as error:  # a phase that broke is said; the others still run
                print(f"{phase}: FAILED: {type(error).__name__}: {str(error)[:1500]}")
                for role in SPOKES:
                    fleet.restore(role)
            print(f"({phase}: {time.monotonic() - t0:.0f} s)", flush=True)
        counts = b.forced()
        forced = sum(len(c["forced"]) for c in counts.values())
        print(
            f"forced updates on the hub: {forced} (target 0) over {sum(c['updates'] for c in counts.values())} "
            f"updates in {len(counts)} repositories; the bench's own rewrites "
            f"{sum(c['bench'] for c in counts.values())}; deleted {sum(c['deleted'] for c in counts.values())}, "
            f"unreadable {sum(c['unknown'] for c in counts.values())}"
        )
        for name, c in counts.items():
            print(f"  {name}: {c['created']} refs created, {c['updates']} updates, {len(c['forced'])} forced")
            for line in c["forced"][:10]:
                print(f"  forced in {name}: {line}")
    print(f"fleet bench: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flaps", type=int, default=FLAPS, help="link flaps per spoke")
    parser.add_argument("--notes", type=int, default=20, help="latency: notes per spoke")
    parser.add_argument("--backlog", type=int, default=60, help="notes per agent while cut")
    parser.add_argument("--commits", type=int, default=1000, help="restore: commits of the restored agent")
    parser.add_argument("--idle", type=float, default=60, help="idle RSS: seconds after start")
    parser.add_argument("--quiet", type=float, default=1.0, help="the daemons' git.quiet_period_s")
    parser.add_argument("--seed", type=int, default=47)
    args = parser.parse_args()
    main(
        flap_count=args.flaps,
        notes=args.notes,
        backlog_notes=args.backlog,
        commits=args.commits,
        idle_s=args.idle,
        quiet_s=args.quiet,
        seed=args.seed,
    )
