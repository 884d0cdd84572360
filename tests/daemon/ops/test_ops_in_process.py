"""The ops room's in-process tests: install's plans and directories, and L4 maintenance, on a tmp prefix.

``plan_install`` / ``plan_uninstall`` are worked out and executed in this
interpreter under a temporary destdir (systemd, when there is a ``systemctl``,
is asked offline with ``--root``, as ``memstrata install --destdir`` does); the
maintenance functions run on the real embedded store of a fresh root, opened
as the CLI opens it with the daemon down.  tests/daemon/ops/test_install.py and
test_maintenance.py run the same through the command line and a daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
import yaml

from daemon.common.config import load_config
from daemon.common.domain_errors import InvalidRequestError
from daemon.common.settings import store_settings
from daemon.ops import install
from daemon.ops.maintenance import backup, cleanup, restore
from layers.common.safefs import UnsafePathError
from layers.conversation.adapters.store import ConversationStore
from layers.conversation.lifecycle.backup import NotABackupError
from protocol.operations import Cleanup
from tests.helpers import commits

HAVE_SYSTEMCTL = shutil.which("systemctl") is not None


class Tree:
    """A temporary installation: the OpenClaw root, the configuration and the "/" system files go to."""

    def __init__(self, base: Path) -> None:
        self.root = base / "openclaw"
        self.config = base / "etc" / "memstrata" / "memstrata.yaml"
        self.dest = base / "sys"
        self.units = self.dest / "etc" / "systemd" / "system"
        self.base = base

    def plan(self, **options) -> install.Plan:
        return install.plan_install(self.root, self.config, destdir=self.dest, **options)

    def files(self) -> dict[str, tuple]:
        """Every path under the tree with its mode, size and mtime: what "changed nothing" compares."""
        return {
            str(p.relative_to(self.base)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(self.base.rglob("*"))
        }


@pytest.fixture
def tree(tmp_path) -> Tree:
    return Tree(tmp_path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _verbs(plan: install.Plan) -> dict[str, str]:
    return {a.target: a.verb for a in plan.actions}


# ---------------------------------------------------------------- install


def test_a_dry_run_lists_every_action_and_changes_nothing(tree):
    plan = tree.plan()
    lines: list[str] = []
    plan.execute(dry_run=True, echo=lines.append)
    assert tree.files() == {}, "nothing written, not even a directory"
    verbs = _verbs(plan)
    assert verbs[str(tree.config)] == "create" and verbs[str(tree.units / "memstrata.service")] == "create"
    assert verbs[str(tree.root / "workspace")] == "create"
    assert all(line.startswith("would ") for line in lines) and len(lines) == len(plan.actions)
    document = plan.to_json(dry_run=True)
    assert json.loads(json.dumps(document))["changed"] is False and document["systemd"] == "destdir"


def test_install_writes_what_it_planned_and_a_second_plan_has_nothing_to_do(tree):
    plan = tree.plan()
    plan.execute(dry_run=False)
    config = load_config(tree.config)
    assert _mode(tree.config) == 0o640 and config.paths.root == tree.root
    assert config.paths.state_dir == tree.dest / "var" / "lib" / "memstrata"
    for path, mode in (
        (tree.root, 0o755),
        (config.paths.agents_dir, 0o755),
        (config.paths.audit_dir, 0o750),
        (config.paths.state_dir, 0o700),
        (config.paths.socket.parent, 0o750),
    ):
        assert path.is_dir() and _mode(path) == mode, (path, oct(_mode(path)))
    assert commits(config.paths.workspace), "the main workspace starts with a commit"
    service = (tree.units / "memstrata.service").read_text()
    assert service.startswith(install.MARKER) and f"--config {tree.config} run" in service
    body = "\n".join(line for line in service.splitlines() if not line.startswith("#"))
    assert "/opt/memstrata" not in body and "/root/.openclaw" not in body
    launcher = json.loads(
        (config.paths.workspace / "skills" / "mem0-integration" / "memstrata-install.json").read_text()
    )
    assert launcher["config"] == str(tree.config) and launcher["python"] == f"{sys.prefix}/bin/python"
    if HAVE_SYSTEMCTL:
        assert (tree.units / "multi-user.target.wants" / "memstrata.service").is_symlink()

    before = tree.files()
    again = tree.plan()
    assert again.actions == [], [a.line(True) for a in again.actions]
    again.execute(dry_run=False)
    assert tree.files() == before


def test_a_unit_install_did_not_write_is_backed_up_before_it_is_replaced(tree):
    tree.units.mkdir(parents=True)
    (tree.units / "memstrata.service").write_text("[Service]\nExecStart=/bin/true\n")
    plan = tree.plan()
    assert _verbs(plan)[str(tree.units / "memstrata.service")] == "update"
    assert any(a.verb == "backup" and a.target == str(tree.units / "memstrata.service") for a in plan.actions)
    plan.execute(dry_run=False)
    (backup_file,) = tree.units.glob("memstrata.service.bak-*")
    assert backup_file.read_text() == "[Service]\nExecStart=/bin/true\n"


def test_cron_instead_of_timers_and_uninstall_keeps_every_piece_of_data(tree):
    tree.plan(cron=True).execute(dry_run=False)
    cron = tree.dest / "etc" / "cron.d" / "mem0-cleanup"
    assert cron.read_text().startswith(install.MARKER) and str(tree.config) in cron.read_text()
    assert not (tree.units / "memstrata-backup.timer").exists(), "cron or timers, not both"
    config = load_config(tree.config)
    (config.paths.workspace / "MEMORY.md").write_text("# MEMORY\nkept through an uninstall\n")

    install.plan_uninstall(tree.config, destdir=tree.dest).execute(dry_run=False)
    assert not cron.exists() and not (tree.units / "memstrata.service").exists()
    assert not (config.paths.workspace / "skills" / "mem0-integration" / "mem0_client.py").exists()
    assert (config.paths.workspace / "MEMORY.md").read_text() == "# MEMORY\nkept through an uninstall\n"
    assert tree.config.is_file() and config.paths.state_dir.is_dir() and config.paths.registry.is_file()


def test_paths_systemd_cannot_carry_and_an_existing_config_of_another_root_are_refused(tree, tmp_path):
    with pytest.raises(install.InstallError, match="blank"):
        install.plan_install(tmp_path / "my root", tree.config, destdir=tree.dest)
    tree.plan().execute(dry_run=False)
    with pytest.raises(install.InstallError, match="already exists and its root is"):
        install.plan_install(tmp_path / "elsewhere", tree.config, destdir=tree.dest)
    assert not (tmp_path / "elsewhere").exists()


# ---------------------------------------------------------------- directories (init's)


def test_make_directories_creates_what_is_missing_once(service_root):
    config = load_config(service_root)
    shutil.rmtree(config.paths.audit_dir)
    made = install.make_directories(config)
    assert [a.target for a in made] == [str(config.paths.audit_dir)]
    assert _mode(config.paths.audit_dir) == 0o750
    assert install.make_directories(config) == []


def test_make_directories_never_follows_a_symlink_in_the_workspace(service_root, tmp_path):
    config = load_config(service_root)
    logs = config.paths.workspace / "logs"
    shutil.rmtree(logs)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, logs)
    with pytest.raises(UnsafePathError):
        install.make_directories(config)
    assert list(elsewhere.iterdir()) == [], "nothing created through the agent's symlink"


# ---------------------------------------------------------------- L4 maintenance


@pytest.fixture
def offline_store(service_root):
    """The embedded store of a fresh root, opened as the CLI opens it with the daemon down (no embedder)."""
    data = yaml.safe_load(service_root.read_text())
    data["conversation"] = {"enabled": True}
    service_root.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_config(service_root)
    store = ConversationStore(store_settings(config), embedder=None, dim=0)  # type: ignore[arg-type]
    yield config, store
    store.close()


def test_cleanup_backup_and_restore_of_a_fresh_store(offline_store, tmp_path):
    config, store = offline_store
    with pytest.raises(InvalidRequestError, match="needs --max-age-days"):
        cleanup(config, store, Cleanup(False, include_permanent=True))
    report = cleanup(config, store, Cleanup(False))
    assert report["mode"] == "dry-run" and report["scanned"] == 0 and report["errors"] == []
    assert report["audit_dir"] == str(config.paths.audit_dir)

    first = backup(config, store, keep=1)
    assert Path(first["backup"]).is_file() and first["bytes"] > 0 and first["removed"] == []
    second = backup(config, store, keep=1)
    assert second["removed"] == [first["backup"]] and second["kept"] == [second["backup"]], "the newest --keep"

    restored = restore(store, Path(second["backup"]))
    assert restored["restored"] == second["backup"] and store.settings.edge_dir.is_dir()
    with pytest.raises(FileNotFoundError):
        restore(store, tmp_path / "no-such-backup.tar.gz")
    (tmp_path / "not-a-backup.tar.gz").write_bytes(b"plain bytes")
    with pytest.raises(NotABackupError):
        restore(store, tmp_path / "not-a-backup.tar.gz")
