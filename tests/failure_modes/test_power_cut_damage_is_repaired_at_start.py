"""What a power cut (or a SIGKILL) leaves in a workspace is put right at the next start, and said.

Reproduced on main before issue 45: after a cut that left HEAD's commit object an empty file the
daemon's commits failed for good ("COMMITS FAILING"); an ``index.lock`` the killed daemon held
blocked every commit until it was ``git.stale_lock_s`` (60 s) old; a memory file the cut emptied
was committed as if the agent had emptied it.

Here the daemon is really SIGKILLed and the repository then broken as the loop-image cuts of
tests/powercut/ leave it (measured: the objects written since the last sync are empty files, the
branch file can be empty); the full cut itself is tests/powercut/.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from layers.daily import workspace_repo as daily
from tests.helpers import LEAN, git, init_root, wait_for

pytestmark = pytest.mark.slow


def audit_events(root: Path, event: str) -> list[dict]:
    folder = root / "workspace" / "logs" / "security"
    lines = [line for path in sorted(folder.glob("memory-access-*.log")) for line in path.read_text().splitlines()]
    return [e for e in map(json.loads, lines) if e.get("event") == event]


def committed_line(daemon, workspace: Path, rel: str, line: str) -> str:
    def done() -> str | None:
        report = daemon.agent("main")
        if report["pending_commit"] or report["commits_failing"]:
            return None
        out = subprocess.run(["git", "-C", str(workspace), "show", f"HEAD:{rel}"], capture_output=True, text=True)
        return git(workspace, "rev-parse", "HEAD").strip() if line in out.stdout else None

    return wait_for(done, timeout=30, what=f"{line!r} committed\n{daemon.log()[-3000:]}")


def break_head(workspace: Path) -> None:
    """HEAD's commit and tree objects empty files, the branch file empty: a cut of unsynced git writes."""
    for sha in [git(workspace, "rev-parse", rev).strip() for rev in ("HEAD", "HEAD^{tree}")]:
        obj = workspace / ".git" / "objects" / sha[:2] / sha[2:]
        obj.chmod(0o644)
        obj.write_bytes(b"")
    (workspace / ".git" / "refs" / "heads" / "master").write_bytes(b"")


@pytest.fixture
def root(tmp_path):
    return tmp_path, init_root(tmp_path, **LEAN)


def test_a_repository_broken_by_a_cut_is_repaired_at_the_next_start(root, daemons):
    tmp_path, config = root
    workspace = tmp_path / "workspace"
    daemon = daemons(config)
    rel = daily.append_note(workspace, "before the cut").relative_to(workspace).as_posix()
    acknowledged = committed_line(daemon, workspace, rel, "before the cut")
    soul = (workspace / "SOUL.md").read_bytes()
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait()
    break_head(workspace)
    (workspace / "SOUL.md").write_bytes(b"")  # the agent's last write of it never reached the disk
    assert subprocess.run(["git", "-C", str(workspace), "log", "-1"], capture_output=True).returncode != 0

    daemon = daemons(config)

    report = daemon.agent("main")
    assert any(line.startswith("REPAIRED after an unclean stop") for line in report["recovered"]), report
    assert any("REFILLED after an unclean stop: SOUL.md" in line for line in report["recovered"]), report
    assert "REPAIRED after an unclean stop" in daemon.log()
    assert audit_events(tmp_path, "repository_repaired") and audit_events(tmp_path, "file_refilled")
    assert (workspace / "SOUL.md").read_bytes() == soul, "the committed version is back, not an empty file"
    assert subprocess.run(["git", "-C", str(workspace), "fsck", "--full", "--strict"]).returncode == 0
    assert git(workspace, "merge-base", "--is-ancestor", acknowledged, "HEAD") == ""
    status = subprocess.run(
        [sys.executable, "-m", "daemon", "--config", str(config), "status"], capture_output=True, text=True
    )
    assert "REPAIRED after an unclean stop" in status.stdout, status.stdout
    daily.append_note(workspace, "after the repair")
    committed_line(daemon, workspace, rel, "after the repair")
    assert daemon.agent("main")["commits_failing"] is None


def test_damage_met_by_a_commit_is_repaired_and_the_commit_made(root, daemons):
    tmp_path, config = root
    workspace = tmp_path / "workspace"
    daemon = daemons(config)
    rel = daily.append_note(workspace, "first").relative_to(workspace).as_posix()
    committed_line(daemon, workspace, rel, "first")
    break_head(workspace)  # while the daemon runs: nothing tells it until a commit fails

    daily.append_note(workspace, "second")

    committed_line(daemon, workspace, rel, "second")
    assert any(line.startswith("REPAIRED when a commit met the damage") for line in daemon.agent("main")["recovered"])
    assert subprocess.run(["git", "-C", str(workspace), "fsck", "--full", "--strict"]).returncode == 0


def test_after_a_clean_stop_an_emptied_file_is_the_agents_edit(root, daemons):
    tmp_path, config = root
    workspace = tmp_path / "workspace"
    daemon = daemons(config)
    assert daemon.stop() == 0
    (workspace / "SOUL.md").write_bytes(b"")  # a person emptied it on purpose, the daemon down

    daemon = daemons(config)

    wait_for(lambda: git(workspace, "show", "HEAD:SOUL.md") == "", timeout=30, what="the empty SOUL.md committed")
    assert daemon.agent("main")["recovered"] == []


def hold_lock_and_die(workspace: Path, record: Path) -> None:
    """A process takes the index lock as the daemon's commit does (written down in ``record``) and is
    SIGKILLed while it holds it: what a daemon killed mid-commit leaves."""
    code = (
        "import sys; from pathlib import Path; from layers.daily.git.commit import index_lock\n"
        "with index_lock(Path(sys.argv[1]), Path(sys.argv[2])):\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(workspace / ".git"), str(record)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    proc.kill()
    proc.wait()


def test_the_daemons_own_stale_index_lock_is_cleared_at_start(root, daemons):
    tmp_path, config = root
    data = config.read_text().replace("quiet_period_s: 0.3", "quiet_period_s: 0.3\n  stale_lock_s: 3600")
    config.write_text(data)
    workspace = tmp_path / "workspace"
    agent_dir = tmp_path / "workspace" / "agents"
    daemon = daemons(config)
    subprocess.run([sys.executable, "-m", "daemon", "--config", str(config), "agent", "add", "b"], check=True)
    other = wait_for(lambda: (agent_dir / "b-workspace" / ".git").is_dir() and agent_dir / "b-workspace")
    wait_for(lambda: not daemon.agent("b")["pending_commit"], what="b's first commit")
    assert daemon.stop() == 0
    hold_lock_and_die(workspace, tmp_path / "state" / "git-locks" / "main.json")
    # someone else's lock (no record): not the daemon's to remove
    (other / ".git" / "index.lock").write_bytes(b"")
    assert (workspace / ".git" / "index.lock").exists()

    daemon = daemons(config)

    assert not (workspace / ".git" / "index.lock").exists()
    assert "left by the daemon's own process" in daemon.log()
    rel = daily.append_note(workspace, "commits at once").relative_to(workspace).as_posix()
    committed_line(daemon, workspace, rel, "commits at once")
    assert (other / ".git" / "index.lock").exists(), "a lock nobody wrote down is left to its owner"
    (other / ".git" / "index.lock").unlink()


def test_a_live_holders_lock_is_left_alone(tmp_path):
    from daemon.files.recovery import clear_stale_git_locks
    from layers.daily.git.commit import index_lock

    repo = daily.WorkspaceRepo(tmp_path / "ws")
    repo.ensure()
    record = tmp_path / "state" / "git-locks" / "main.json"
    with index_lock(repo.path / ".git", record):
        assert clear_stale_git_locks(tmp_path / "state") == []
        assert (repo.path / ".git" / "index.lock").exists() and record.exists()
    assert not record.exists(), "the record goes with the lock"
