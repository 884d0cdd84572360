"""`memstrata install` / `uninstall`, run for real into a temporary tree.

The system paths (unit and cron directories, state and runtime directories) go
under ``--destdir`` (hidden; for tests and packaging), and systemd is asked
through ``systemctl --root=DESTDIR``, which enables units offline exactly as on
a live system (the ``*.wants`` symlinks).  The booted-systemd run is in
tests/system/.  The skill is run from a workspace with a python3 that lacks
memstrata's packages, against a real daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from daemon.common.config import load_config, parse_config
from daemon.ops.install import ALL_UNITS, MARKER, install_config_text, render_unit
from tests.helpers import FAST, REPO_ROOT, commits, init_root, registry_of, run_cli, wait_for
from tests.test_cron import parse as parse_crontab

SKILL = Path("skills") / "mem0-integration"
SKILL_FILES = sorted(p.name for p in (REPO_ROOT / SKILL).iterdir() if p.is_file())
HAVE_SYSTEMCTL = shutil.which("systemctl") is not None
UNITS = ("memstrata.service", "memstrata-backup.service", "memstrata-cleanup.service", "memstrata-consolidate.service")
TIMERS = ("memstrata-backup.timer", "memstrata-cleanup.timer", "memstrata-consolidate.timer")


class Tree:
    """A temporary installation: OpenClaw root, configuration and the "/" the system files go to."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "openclaw"
        self.config = base / "etc" / "memstrata" / "memstrata.yaml"
        self.dest = base / "sys"
        self.units = self.dest / "etc" / "systemd" / "system"
        self.cron = self.dest / "etc" / "cron.d" / "mem0-cleanup"
        self.state = self.dest / "var" / "lib" / "memstrata"

    def install(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_cli(
            "install",
            "--root",
            str(self.root),
            "--config",
            str(self.config),
            "--destdir",
            str(self.dest),
            *args,
            check=check,
        )

    def uninstall(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_cli("uninstall", "--config", str(self.config), "--destdir", str(self.dest), *args, check=check)

    def snapshot(self) -> dict[str, tuple]:
        """Every path under the tree with its type, mode, size and mtime (what "changed nothing" means)."""
        seen = {}
        for path in sorted(self.base.rglob("*")):
            st = path.lstat()
            link = os.readlink(path) if path.is_symlink() else None
            seen[str(path.relative_to(self.base))] = (st.st_mode, st.st_size, st.st_mtime_ns, link)
        return seen


@pytest.fixture
def tree(tmp_path) -> Tree:
    return Tree(tmp_path)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_install_writes_config_directories_units_and_skill(tree):
    proc = tree.install()
    assert "systemctl start memstrata" in proc.stdout and "systemctl status memstrata" in proc.stdout

    # the configuration: absolute paths, under the root asked for (not under /etc/memstrata)
    assert mode(tree.config) == 0o640 and mode(tree.config.parent) == 0o750
    config = load_config(tree.config)
    assert yaml.safe_load(tree.config.read_text())["paths"]["root"] == str(tree.root)
    assert config.paths.root == tree.root and config.paths.workspace == tree.root / "workspace"
    assert config.paths.state_dir == tree.state
    assert config.paths.socket == tree.dest / "run" / "memstrata" / "memstrata.sock"

    # directories, with their modes; the main workspace with git
    workspace = config.paths.workspace
    assert commits(workspace), "the main workspace starts with a commit"
    for path, expected in (
        (tree.root, 0o755),
        (config.paths.agents_dir, 0o755),
        (config.paths.audit_dir, 0o750),
        (tree.state, 0o700),
        (config.paths.socket.parent, 0o750),
    ):
        assert path.is_dir() and mode(path) == expected, (path, oct(mode(path)))
    assert config.paths.audit_dir == workspace / "logs" / "security"

    # units with this installation's paths; the shipped files are unchanged
    for name in (*UNITS, *TIMERS):
        text = (tree.units / name).read_text()
        assert text.startswith(MARKER) and mode(tree.units / name) == 0o644
        body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        assert "/opt/memstrata" not in body and "/root/.openclaw" not in body, name
        assert "/opt/memstrata" in (REPO_ROOT / "systemd" / name).read_text() or name.endswith(".timer")
    service = (tree.units / "memstrata.service").read_text()
    assert f"ExecStart={sys.prefix}/bin/memstrata --config {tree.config} run\n" in service
    rw = next(line for line in service.splitlines() if line.startswith("ReadWritePaths="))
    assert str(tree.root) in rw.split("=", 1)[1].split()
    # ProtectHome=tmpfs hides home directories: the root is bound back, and the Python the
    # virtualenv runs on when it lives under one (pyenv in /root/.pyenv)
    assert "ProtectHome=tmpfs\n" in service
    binds = next(line for line in service.splitlines() if line.startswith("BindPaths="))
    assert str(tree.root) in binds.split("=", 1)[1].split()
    python_home = Path(sys.base_prefix).resolve()
    if python_home.parts[1] in ("root", "home"):
        readonly = next(line for line in service.splitlines() if line.startswith("BindReadOnlyPaths="))
        assert str(python_home) in readonly.split("=", 1)[1].split()
    backup = (tree.units / "memstrata-backup.service").read_text()
    assert f"ExecStart={sys.prefix}/bin/memstrata --config {tree.config} backup --keep 7\n" in backup
    assert not tree.cron.exists(), "timers or cron, not both"
    if HAVE_SYSTEMCTL:
        assert (tree.units / "multi-user.target.wants" / "memstrata.service").is_symlink()
        for timer in TIMERS:
            assert (tree.units / "timers.target.wants" / timer).is_symlink()
    if shutil.which("systemd-analyze"):
        verify = subprocess.run(
            ["systemd-analyze", "verify", str(tree.units / "memstrata.service")], capture_output=True, text=True
        )
        assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr

    # the skill, with its launcher, and the example registry at the seed's path
    skill = workspace / SKILL
    assert sorted(p.name for p in skill.iterdir()) == sorted(
        [*SKILL_FILES, "memstrata-install.json", "project_registry.yaml", "protocol"]
    )
    for name in SKILL_FILES:
        assert (skill / name).read_bytes() == (REPO_ROOT / SKILL / name).read_bytes()
    for source in (REPO_ROOT / "protocol").glob("*.py"):  # the package the skill's client imports, beside it
        assert (skill / "protocol" / source.name).read_bytes() == source.read_bytes()
    launcher = json.loads((skill / "memstrata-install.json").read_text())
    assert launcher["config"] == str(tree.config) and launcher["agent"] == "main"
    assert launcher["python"] == f"{sys.prefix}/bin/python" and launcher["checkout"] == str(REPO_ROOT)
    assert config.paths.registry == skill / "project_registry.yaml"
    assert config.paths.registry.read_text() == (REPO_ROOT / "project_registry.yaml").read_text()


def test_a_second_install_changes_nothing_and_a_dry_run_changes_nothing(tree):
    before = tree.snapshot()
    dry = tree.install("--dry-run")
    assert tree.snapshot() == before == {}, "a dry run creates nothing"
    assert "would create" in dry.stdout and str(tree.config) in dry.stdout and "memstrata.service" in dry.stdout

    tree.install()
    installed = tree.snapshot()
    again = json.loads(tree.install("--json").stdout)
    assert again["actions"] == [] and again["changed"] is False
    assert tree.snapshot() == installed, "running install again touches nothing"
    assert "nothing to do" in tree.install().stdout

    # a drifted unit is put back; the dry run only says so
    unit = tree.units / "memstrata.service"
    unit.write_text(unit.read_text().replace("Restart=on-failure", "Restart=no"))
    drifted = tree.snapshot()
    dry = json.loads(tree.install("--dry-run", "--json").stdout)
    assert [(a["action"], a["target"]) for a in dry["actions"]] == [("update", str(unit))]
    assert tree.snapshot() == drifted
    tree.install()
    assert "Restart=on-failure" in unit.read_text()


def test_units_bind_back_a_checkout_the_hardening_hides(tmp_path):
    """PrivateTmp=yes hid a checkout under /tmp from the booted unit ("Failed to locate
    executable /tmp/…/.venv/bin/memstrata"); ProtectHome=tmpfs hides one under a home."""
    checkout = tmp_path / "checkout"  # under /tmp, like a CI clone
    shutil.copytree(REPO_ROOT / "systemd", checkout / "systemd")
    root, config_path = tmp_path / "openclaw", Path("/etc/memstrata/memstrata.yaml")
    config = parse_config(install_config_text(root, config_path), config_path)
    for name in UNITS:
        text = render_unit(name, config, config_path, checkout / ".venv", checkout)
        lines = text.splitlines()
        binds = next(line for line in lines if line.startswith("BindPaths=")).split("=", 1)[1].split()
        readonly = next(line for line in lines if line.startswith("BindReadOnlyPaths=")).split("=", 1)[1].split()
        assert binds == [str(root)], (name, binds)
        assert str(checkout) in readonly and str(checkout / ".venv") not in readonly, (name, readonly)


def test_a_path_remote_is_writable_for_the_unit_and_a_url_is_not(tmp_path):
    """The hub's git.remote is the top repository on its own disk: under ProtectSystem=strict the daemon
    could not push its agents or the shared core there without ReadWritePaths= for it.  Nothing else of
    the unit changes (the repositories' rights for the git user are ACLs, not set-group-ID directories)."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "systemd", checkout / "systemd")
    root, config_path = tmp_path / "openclaw", Path("/etc/memstrata/memstrata.yaml")
    base = yaml.safe_load(install_config_text(root, config_path))

    def unit(remote: str) -> list[str]:
        text = yaml.safe_dump({**base, "git": {**(base.get("git") or {}), "remote": remote}})
        return render_unit("memstrata.service", parse_config(text, config_path), config_path, checkout, checkout).split(
            "\n"
        )

    def rw_paths(lines: list[str]) -> list[str]:
        return next(line for line in lines if line.startswith("ReadWritePaths=")).split("=", 1)[1].split()

    hub, spoke = unit("/srv/memstrata/fleet.git"), unit("ssh://git@100.115.94.1/srv/memstrata/fleet.git")
    assert "-/srv/memstrata/fleet.git" in rw_paths(hub) and not any("fleet.git" in p for p in rw_paths(spoke))
    differ = [(a, b) for a, b in zip(hub, spoke, strict=True) if a != b]
    assert [a.split("=")[0] for a, _b in differ] == ["ReadWritePaths"], differ
    assert "RestrictSUIDSGID=yes" in hub and "CAP_FSETID" not in "\n".join(hub)


def test_an_existing_config_is_kept_and_a_foreign_unit_is_backed_up(tree):
    # the README's old recipe: the demo config (`root: .`) copied to /etc, so every path is under /etc/memstrata
    init_root(tree.base / "demo")
    tree.config.parent.mkdir(parents=True)
    shutil.copy(tree.base / "demo" / "memstrata.yaml", tree.config)
    kept = tree.config.read_bytes()
    proc = tree.install(check=False)
    assert proc.returncode == 1, proc.stdout
    assert f"already exists and its root is {tree.config.parent}, not {tree.root}" in proc.stderr
    assert not tree.dest.exists() and not tree.root.exists(), "a refused install changes nothing"

    proc = run_cli("install", "--config", str(tree.config), "--destdir", str(tree.dest))
    assert "paths.root is relative" in proc.stderr and f"every path lies under {tree.config.parent}" in proc.stderr
    assert f"kept             {tree.config} (existing configuration" in proc.stdout
    assert tree.config.read_bytes() == kept, "an existing configuration is never rewritten"

    # a unit file someone copied by hand is backed up before it is replaced
    other = Tree(tree.base / "o")  # short: a Unix socket path is at most 107 bytes
    other.units.mkdir(parents=True)
    (other.units / "memstrata.service").write_text("[Service]\nExecStart=/bin/true\n")
    proc = other.install()
    backups = list(other.units.glob("memstrata.service.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == "[Service]\nExecStart=/bin/true\n"
    assert "backed up" in proc.stdout and (other.units / "memstrata.service").read_text().startswith(MARKER)


def test_cron_instead_of_timers_and_back(tree):
    tree.install()
    proc = tree.install("--cron")
    assert mode(tree.cron) == 0o644 and tree.cron.read_text().startswith(MARKER)
    for timer in TIMERS:
        assert not (tree.units / timer).exists(), "cron replaces the timers"
        assert not (tree.units / "timers.target.wants" / timer).exists()
    assert (tree.units / "memstrata.service").exists()
    env, jobs = parse_crontab(tree.cron.read_text())
    assert env["MEMSTRATA_CONFIG"] == str(tree.config)
    config = load_config(tree.config)
    commands = {" ".join(times): command for times, _, command in jobs}
    assert commands["0 3 * * *"].startswith(f"cd {config.paths.workspace / SKILL} && python3 memory_cleanup.py")
    assert commands["15 2 * * *"].startswith(f"{sys.prefix}/bin/memstrata backup --keep 7 >> {config.paths.audit_dir}/")
    consolidate = f"{sys.prefix}/bin/memstrata consolidate --execute >> {config.paths.audit_dir}/"
    assert commands["30 3 * * *"].startswith(consolidate)
    assert "removed" in proc.stdout
    tree.install()
    assert not tree.cron.exists() and (tree.units / TIMERS[0]).exists()


def test_uninstall_removes_what_install_wrote_and_keeps_all_data(tree):
    tree.install("--cron")
    config = load_config(tree.config)
    run_cli("agent", "add", "alpha", "--project", "infra", config=tree.config)
    alpha = config.paths.agents_dir / "alpha-workspace"
    assert (alpha / SKILL / "memstrata-install.json").is_file(), "agent add installs the skill"
    edited = alpha / SKILL / "SKILL.md"
    edited.write_text(edited.read_text() + "\nmy own notes\n")
    history = commits(alpha)
    registry = config.paths.registry.read_text()
    foreign = tree.units / "other.service"
    foreign.write_text("[Service]\nExecStart=/bin/true\n")

    dry = tree.snapshot()
    assert "would remove" in tree.uninstall("--dry-run").stdout
    assert tree.snapshot() == dry

    proc = tree.uninstall()
    assert "kept" in proc.stdout
    for name in (*UNITS, *TIMERS):
        assert not (tree.units / name).exists()
    assert not (tree.units / "multi-user.target.wants" / "memstrata.service").exists()
    assert not tree.cron.exists() and foreign.exists()
    assert not (config.paths.workspace / SKILL / "mem0_client.py").exists()
    assert sorted(p.name for p in (alpha / SKILL).iterdir()) == ["SKILL.md"], "the edited file stays"
    # every piece of data stays
    assert tree.config.is_file() and config.paths.registry.read_text() == registry
    assert (tree.state / "tokens.json").is_file() and commits(alpha) == history
    assert (alpha / ".memstrata" / "token").is_file() and (alpha / "MEMORY.md").is_file()
    again = json.loads(tree.uninstall("--json").stdout)
    assert again["actions"] == []


def host_python() -> list[str]:
    """A python3 without memstrata's packages: the host's, else this one without site-packages."""
    for candidate in ("/usr/bin/python3", shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-c", "import pydantic, click"], capture_output=True)
            if probe.returncode != 0:
                return [candidate]
    return [sys.executable, "-S"]


def test_the_copied_skill_used_to_die_without_the_launcher(tmp_path):
    """What the seed's install did (copy the folder) and what it gave: ModuleNotFoundError: daemon."""
    init_root(tmp_path)
    copy = tmp_path / "copy" / SKILL
    shutil.copytree(REPO_ROOT / SKILL, copy)
    proc = subprocess.run(
        [*host_python(), "memory_cleanup.py", "--dry-run"], cwd=copy, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot load memstrata" in proc.stderr and "memstrata install" in proc.stderr


def test_the_installed_skill_runs_from_a_workspace_with_a_foreign_python(tmp_path, daemons):
    """The seed's calls, from {workspace}/skills/mem0-integration, with a python3 lacking memstrata's packages;
    in a workspace created by hand while the daemon runs (the daemon installs the skill there)."""
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "alpha", "--project", "infra", config=config)
    daemon = daemons(config)
    wait_for(lambda: daemon.status()["conversation"]["reachable"], timeout=120, what="L4 reachable")
    by_hand = tmp_path / "workspace" / "agents" / "x-workspace"
    by_hand.mkdir()
    skill = by_hand / SKILL
    wait_for(lambda: (skill / "memstrata-install.json").is_file(), timeout=60, what="the daemon installs the skill")
    wait_for(lambda: (by_hand / ".memstrata" / "token").is_file(), timeout=60, what="x's token")
    assert json.loads((skill / "memstrata-install.json").read_text())["agent"] == "x"

    python = host_python()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_") and k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"

    def run(workspace: Path, script: str, *args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [*python, script, *args], cwd=workspace / SKILL, env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, (script, args, proc.stdout, proc.stderr)
        return proc

    added = json.loads(run(by_hand, "mem0_client.py", "add", "Qdrant 部署在 6333 端口", "--json").stdout)
    assert added["visibility"] == "private"
    found = json.loads(run(by_hand, "mem0_client.py", "search", "Qdrant 端口", "--json").stdout)
    assert any(r["memory"] == "Qdrant 部署在 6333 端口" and r["agent_id"] == "x" for r in found["results"])

    alpha = tmp_path / "workspace" / "agents" / "alpha-workspace"
    inferred = json.loads(run(alpha, "mem0_client.py", "add", "infra 的网关重启了", "--json").stdout)
    assert inferred["visibility"] == "project" and inferred["project_id"] == "infra", inferred

    run_cli("note", "--agent", "alpha", "网关端口 18789", config=config)
    wait_for(
        lambda: "18789" in run(alpha, "local_search.py", "端口").stdout, timeout=60, what="local_search finds the note"
    )
    cleanup = run(tmp_path / "workspace", "memory_cleanup.py", "--dry-run")
    assert "dry-run: scanned" in cleanup.stdout
    for workspace in (by_hand, alpha, tmp_path / "workspace"):
        assert not (workspace / SKILL / "__pycache__").exists(), "no caches left in the agent's workspace"


def test_agent_add_gives_a_new_project_keywords(tmp_path):
    config = init_root(tmp_path)
    run_cli("agent", "add", "a", "--project", "infra", config=config)
    run_cli("agent", "add", "b", "--project", "web", "--keywords", "网站, nginx", config=config)
    run_cli("agent", "add", "c", "--project", "web", "--keywords", "cdn", config=config)
    run_cli("agent", "add", "d", "--project", "infra", config=config)
    projects = yaml.safe_load(registry_of(tmp_path).read_text())["projects"]
    assert projects["infra"]["keywords"] == ["infra"]
    assert projects["web"]["keywords"] == ["网站", "nginx", "cdn"]
    proc = run_cli(
        "agent", "add", "e", "--project", "web", "--project", "infra", "--keywords", "x", config=config, check=False
    )
    assert proc.returncode == 2 and "exactly one --project" in proc.stderr


def test_install_on_this_machine_where_systemd_is_not_running(tmp_path):
    """The real paths (/etc/systemd/system, /etc/cron.d, /var/lib/memstrata, /run/memstrata), in a private
    mount namespace over scratch tmpfs: no systemd runs here, so install says so and exits 3, with the
    files written and the units enabled offline for the next boot."""
    root, config, out = tmp_path / "openclaw", tmp_path / "etc" / "memstrata.yaml", tmp_path / "out"
    out.mkdir()
    memstrata = " ".join([sys.executable, "-m", "daemon"])
    script = f"""
set -u
for d in /etc/systemd/system /etc/cron.d /var/lib /run; do mount -t tmpfs -o mode=0755 tmpfs "$d" || exit 99; done
install="{memstrata} install --root {root} --config {config}"
$install > {out}/first.out 2> {out}/first.err; echo $? > {out}/first.rc
$install --json > {out}/again.json 2> {out}/again.err; echo $? > {out}/again.rc
cp -a /etc/systemd/system {out}/units
stat -c '%a' /var/lib/memstrata /run/memstrata > {out}/modes
{memstrata} uninstall --config {config} > {out}/uninstall.out 2>&1; echo $? > {out}/uninstall.rc
ls -A /etc/systemd/system > {out}/left
"""
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"cannot make a private mount namespace here (needs root): {proc.stderr}"
    first_err = (out / "first.err").read_text()
    assert (out / "first.rc").read_text().strip() == "3", (out / "first.out").read_text() + first_err
    assert "systemd is not running" in first_err and "enabled for the next boot" in first_err
    assert (
        f"ExecStart={sys.prefix}/bin/memstrata --config {config} run"
        in (out / "units" / "memstrata.service").read_text()
    )
    if HAVE_SYSTEMCTL:
        assert (out / "units" / "multi-user.target.wants" / "memstrata.service").is_symlink()
        assert (out / "units" / "timers.target.wants" / "memstrata-backup.timer").is_symlink()
    assert (out / "modes").read_text().split() == ["700", "750"]
    again = json.loads((out / "again.json").read_text())
    assert (
        (out / "again.rc").read_text().strip() == "3" and again["actions"] == [] and again["systemd"] == "not running"
    )
    assert load_config(config).paths.state_dir == Path("/var/lib/memstrata")
    assert (out / "uninstall.rc").read_text().strip() == "3", (out / "uninstall.out").read_text()
    assert (out / "left").read_text().split() in ([], ["multi-user.target.wants", "timers.target.wants"])


def test_the_skill_is_never_written_through_an_agents_symlink(tmp_path):
    """An agent may point skills/ (or one of its files) anywhere: nothing is written there."""
    from daemon.common import skill
    from layers.common.safefs import UnsafePathError

    launcher = skill.Launcher.current(None, "a")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("mine\n")
    ws = tmp_path / "a-workspace"
    ws.mkdir()
    (ws / "skills").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        skill.sync_skill(ws, launcher)
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]

    (ws / "skills").unlink()
    (ws / SKILL).mkdir(parents=True)
    (ws / SKILL / "mem0_client.py").symlink_to(outside / "victim")
    with pytest.raises(UnsafePathError):
        skill.sync_skill(ws, launcher)
    assert (outside / "victim").read_text() == "mine\n"


def test_a_refresh_updates_changed_code_backs_up_edits_and_never_touches_the_registry(tmp_path):
    from daemon.common import skill

    checkout = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / SKILL, checkout / SKILL)
    shutil.copy(REPO_ROOT / "project_registry.yaml", checkout / "project_registry.yaml")
    ws = tmp_path / "workspace"
    ws.mkdir()
    launcher = skill.Launcher("/opt/venv/bin/python", str(checkout), "/etc/memstrata/memstrata.yaml", "main")
    assert skill.sync_skill(ws, launcher, checkout=checkout)
    registry = ws / SKILL / "project_registry.yaml"
    skill.seed_registry(ws, registry, checkout=checkout)
    registry.write_text("version: 1\nprojects: {}\nagents: {}\n# the operator's\n")
    assert skill.sync_skill(ws, launcher, checkout=checkout) == [], "nothing changed, nothing written"

    (ws / SKILL / "mem0_client.py").write_text("# the agent's own edit\n")
    for name in ("mem0_client.py", "local_search.py"):  # a new version of the checkout
        path = checkout / SKILL / name
        path.write_text(path.read_text() + "\n# newer\n")
    changes = skill.sync_skill(ws, launcher, checkout=checkout)
    backups = list((ws / SKILL).glob("mem0_client.py.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == "# the agent's own edit\n", changes
    assert not list((ws / SKILL).glob("local_search.py.bak-*")), "an unedited file is refreshed without a backup"
    for name in ("mem0_client.py", "local_search.py"):
        assert (ws / SKILL / name).read_bytes() == (checkout / SKILL / name).read_bytes()
    assert registry.read_text().endswith("# the operator's\n")
    assert skill.seed_registry(ws, registry, checkout=checkout) == []


def test_install_into_a_scratch_tree_writes_nothing_outside_it(tmp_path):
    """--units-dir and --state-dir: the whole install, tried where an operator chooses; systemd not asked."""
    system_units = {p.name for p in Path("/etc/systemd/system").glob("memstrata*")}
    config = tmp_path / "memstrata.yaml"
    args = ["install", "--root", str(tmp_path / "openclaw"), "--config", str(config),
            "--state-dir", str(tmp_path / "state"), "--units-dir", str(tmp_path / "units")]  # fmt: skip
    done = json.loads(run_cli(*args, "--json").stdout)
    assert done["systemd"] == "not asked" and any("--units-dir" in w for w in done["warnings"])
    assert sorted(p.name for p in (tmp_path / "units").iterdir()) == sorted(ALL_UNITS)
    assert f"--config {config} run" in (tmp_path / "units" / "memstrata.service").read_text()
    written = yaml.safe_load(config.read_text())["paths"]
    assert written["state_dir"] == str(tmp_path / "state")
    assert written["socket"] == str(tmp_path / "state" / "run" / "memstrata.sock")
    assert (tmp_path / "openclaw" / "workspace" / "skills" / "mem0-integration" / "SKILL.md").is_file()
    assert {p.name for p in Path("/etc/systemd/system").glob("memstrata*")} == system_units
    assert not any(a["action"] == "run" for a in done["actions"]), "systemctl never run"
    again = json.loads(run_cli(*args, "--json").stdout)
    assert again["actions"] == [], "a second run changes nothing"
    assert run_cli("--config", str(config), "status", check=False).returncode == 3
