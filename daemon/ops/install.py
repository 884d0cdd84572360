"""``memstrata install`` / ``uninstall``: set up the service the way an operator would, idempotently.

Everything is first worked out as a :class:`Plan` (a list of :class:`Action`, each
with what it does and a function that does it), then either printed
(``--dry-run``) or executed.  What already matches is not an action, so running
install twice changes nothing the second time.

The shipped files (``systemd/*``, ``cron.d/mem0-cleanup``) name the reference
layout: the checkout at /opt/memstrata with its virtualenv in .venv, the
configuration at /etc/memstrata/memstrata.yaml and OpenClaw's root
/root/.openclaw.  Installed copies get this installation's paths instead, and a
first comment line (:data:`MARKER`) that lets ``uninstall`` remove only what
``install`` wrote.  A file found in their place without that line is backed up
before it is replaced.

``destdir`` puts the system paths (units, cron file, state and runtime
directories) under another directory and keeps the running systemd out of it:
for tests and packaging, as ``make install DESTDIR=…`` does.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from daemon.common import skill
from daemon.common.config import Config, demo_config_text, load_config, parse_config
from daemon.common.workspaces import create_workspace, discover
from layers.common import safefs
from layers.common.fsutil import atomic_write, private_dirs
from layers.common.ids import MAIN_AGENT
from layers.conversation.policy.registry import load_registry
from protocol.locations import OPENCLAW_ROOT, SYSTEM_CONFIG

CHECKOUT = skill.CHECKOUT
DEFAULT_ROOT = OPENCLAW_ROOT
DEFAULT_CONFIG = SYSTEM_CONFIG
UNIT_DIR = "etc/systemd/system"
CRON_DIR = "etc/cron.d"
CRON_FILE = "mem0-cleanup"
MAIN_UNIT = "memstrata.service"
TIMERS = ("memstrata-backup.timer", "memstrata-cleanup.timer", "memstrata-consolidate.timer")
TIMER_SERVICES = ("memstrata-backup.service", "memstrata-cleanup.service", "memstrata-consolidate.service")
ALL_UNITS = (MAIN_UNIT, *TIMER_SERVICES, *TIMERS)
MARKER = "# Installed by `memstrata install`"
# What the shipped files say, most specific first (one pass: a replacement is never replaced again).
SHIPPED_VENV = "/opt/memstrata/.venv"
SHIPPED_CHECKOUT = "/opt/memstrata"
SHIPPED_CONFIG = "/etc/memstrata/memstrata.yaml"
SHIPPED_ROOT = "/root/.openclaw"
SHIPPED_STATE = "/var/lib/memstrata"
SHIPPED_RUN = "/run/memstrata"
# systemd and cron lines cannot take these unquoted (systemd expands %, cron splits on blanks)
_UNSAFE_PATH = re.compile(r"[\s%\"'\\$;`]")

# Exit status of install/uninstall when the files are in place but systemd could not be asked
# (no systemctl, or systemd is not running): the operator has to finish by hand.
EXIT_SYSTEMD_SKIPPED = 3


class InstallError(Exception):
    """A problem the operator can fix; nothing was changed."""


_PAST = {
    "create": "created",
    "update": "updated",
    "backup": "backed up",
    "mkdir": "made dir",
    "run": "ran",
    "remove": "removed",
    "install": "installed",
}


@dataclass
class Action:
    verb: str  # create, update, backup, mkdir, run, remove, skill
    target: str
    detail: str = ""
    apply: Callable[[], object] | None = None  # its result is not used

    def line(self, dry_run: bool) -> str:
        verb = f"would {self.verb}" if dry_run else _PAST.get(self.verb, self.verb)
        return f"{verb:<16} {self.target}" + (f"  ({self.detail})" if self.detail else "")


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    systemd: str = "running"  # running | not running | no systemctl | destdir

    def add(self, verb: str, target: object, detail: str = "", apply: Callable[[], object] | None = None) -> None:
        self.actions.append(Action(verb, str(target), detail, apply))

    def execute(self, dry_run: bool, echo: Callable[[str], None] | None = None) -> None:
        for action in self.actions:
            if not dry_run and action.apply is not None:
                action.apply()
            if echo:
                echo(action.line(dry_run))

    @property
    def exit_code(self) -> int:
        return EXIT_SYSTEMD_SKIPPED if self.systemd in ("not running", "no systemctl") else 0

    def to_json(self, dry_run: bool) -> dict:
        return {
            "dry_run": dry_run,
            "changed": bool(self.actions) and not dry_run,
            "actions": [
                {"action": a.verb, "target": a.target, "detail": a.detail, "done": not dry_run} for a in self.actions
            ],
            "kept": self.kept,
            "warnings": self.warnings,
            "systemd": self.systemd,
            "next": self.next_steps,
        }


# ---------------------------------------------------------------- what gets written


def install_config_text(root: Path, config_path: Path, destdir: Path = Path("/"), state_dir: Path | None = None) -> str:
    """The configuration ``install`` writes: the demo file's settings with absolute paths.

    ``paths.root`` is absolute, so every ``{root}``/``{workspace}`` template resolves
    under it wherever the file lives; state and socket are the unit's
    ``StateDirectory``/``RuntimeDirectory`` (/var/lib/memstrata, /run/memstrata).
    """
    values = {
        "root": str(root),
        "state_dir": str(state_dir or _under(destdir, SHIPPED_STATE)),
        # with --state-dir the socket's directory goes beside it: a scratch install writes no /run
        "socket": str((state_dir / "run" if state_dir else _under(destdir, SHIPPED_RUN)) / "memstrata.sock"),
    }
    text = demo_config_text(root)
    text = re.sub(r"\A# .*\n", f"# memstrata configuration (written by `memstrata install --root {root}`).\n", text)
    head, sep, rest = text.partition("\npaths:\n")
    block, blank, tail = rest.partition("\n\n")
    for key, value in values.items():

        def set_value(m: re.Match[str], v: object = value) -> str:
            return f"{m.group(1)} {json.dumps(v)}"

        block, count = re.subn(rf"(?m)^(  {key}:) .*$", set_value, block)
        if count != 1:
            raise RuntimeError(f"the demo configuration has no paths.{key} line to set")
    text = head + sep + block + blank + tail
    config = parse_config(text, config_path)
    if config.paths.root != root or str(config.paths.state_dir) != values["state_dir"]:
        raise RuntimeError("the written configuration does not resolve to the intended paths")
    return text


def _under(destdir: Path, path: str) -> Path:
    return destdir / path.lstrip("/")


def _check_path(what: str, path: Path) -> None:
    if not path.is_absolute():
        raise InstallError(f"{what} must be an absolute path: {path}")
    if _UNSAFE_PATH.search(str(path)):
        raise InstallError(
            f"{what} {path} contains a blank or one of % \" ' \\ $ ; ` (systemd units and cron lines cannot carry it)"
        )


def substitutions(config: Config, config_path: Path, prefix: Path, checkout: Path) -> dict[str, str]:
    """Shipped path → this installation's path."""
    return {
        SHIPPED_VENV: str(prefix),
        SHIPPED_CHECKOUT: str(checkout),
        SHIPPED_CONFIG: str(config_path),
        f"{SHIPPED_ROOT}/workspace/logs/security": str(config.paths.audit_dir),
        f"{SHIPPED_ROOT}/workspace": str(config.paths.workspace),
        SHIPPED_ROOT: str(config.paths.root),
        SHIPPED_STATE: str(config.paths.state_dir),
        SHIPPED_RUN: str(config.paths.socket.parent),
    }


def substitute(text: str, mapping: dict[str, str]) -> str:
    """Replace every shipped path in one pass (longest first; only whole path components)."""
    keys = sorted(mapping, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(k) for k in keys) + r"(?![\w.-])")
    return pattern.sub(lambda m: mapping[m.group(0)], text)


def writable_paths(config: Config) -> list[Path]:
    """What the units must be allowed to write besides their state/runtime directories: the root,
    and whatever the configuration puts outside it (a path ``git.remote`` is added by render_unit)."""
    paths = config.paths
    index_dir = Path(paths.index_template.split("{agent}")[0].rstrip("/") or "/")
    candidates = [paths.root, paths.workspace, paths.agents_dir, paths.audit_dir, paths.registry.parent, index_dir]
    # the unit's StateDirectory= and RuntimeDirectory= are writable already (and the runtime one
    # exists only while the daemon runs)
    candidates += [p for p in (paths.state_dir, paths.socket.parent) if str(p) not in (SHIPPED_STATE, SHIPPED_RUN)]
    chosen: list[Path] = []
    for path in candidates:
        if any(path == c or c in path.parents for c in chosen):
            continue
        chosen = [c for c in chosen if path not in c.parents] + [path]
    return chosen


# What the units hide: every home directory (ProtectHome=tmpfs) and the temporary
# directories (PrivateTmp=yes).  What the daemon needs from there is bound back in.
HIDDEN_DIRS = (Path("/root"), Path("/home"), Path("/run/user"), Path("/tmp"), Path("/var/tmp"))


def _hidden(path: Path) -> bool:
    return any(path == hidden or hidden in path.parents for hidden in HIDDEN_DIRS)


def _bind_lines(config: Config, prefix: Path, checkout: Path) -> str:
    """Bind back what the units hide but need: the root and the other places the daemon writes
    (read-write), and this checkout, its virtualenv and the Python the virtualenv runs on
    (read-only; pyenv lives in ``~/.pyenv``, a checkout may sit in a home or temporary directory)."""
    writable = [p for p in writable_paths(config) if _hidden(p)] or [config.paths.root]
    python_home = Path(sys.base_prefix).resolve()
    readonly = [p for p in (checkout, prefix, python_home) if _hidden(p)]
    readonly = [p for p in dict.fromkeys(readonly) if not any(o in p.parents for o in readonly)]
    readonly = [p for p in readonly if not any(p == w or w in p.parents for w in writable)]
    lines = ["BindPaths=" + " ".join(str(p) for p in writable)]
    if readonly:
        lines.append("BindReadOnlyPaths=" + " ".join(str(p) for p in readonly))
    return "\n".join(lines)


def local_remote(config: Config) -> Path | None:
    """``git.remote`` when it is a repository on this machine's disk (``/srv/…``, ``file:///srv/…``): on
    the hub, the daemon pushes its own agents, its report and the shared core there, so the units must
    write it."""
    remote = config.git.remote or ""
    path = remote[len("file://") :] if remote.startswith("file://") else remote
    return Path(path) if path.startswith("/") else None


def render_unit(name: str, config: Config, config_path: Path, prefix: Path, checkout: Path) -> str:
    source = (checkout / "systemd" / name).read_text(encoding="utf-8")
    mapping = substitutions(config, config_path, prefix, checkout)
    text = substitute(source, mapping)
    extra = " ".join(str(p) for p in writable_paths(config))
    remote = local_remote(config)
    if remote is not None:  # "-": a repository not made yet (init-remote comes later) does not stop the unit
        extra += f" -{remote}"

    def rw_line(match: re.Match[str]) -> str:
        present = match.group(1).split()
        missing = [p for p in extra.split() if p not in present]
        return "ReadWritePaths=" + " ".join([*present, *missing])

    text = re.sub(r"(?m)^ReadWritePaths=(.*)$", rw_line, text)
    text = re.sub(r"(?m)^BindPaths=.*$", lambda _: _bind_lines(config, prefix, checkout), text)
    return f"{MARKER} from {checkout}/systemd/{name}; `memstrata uninstall` removes it.\n{text}"


def render_cron(config: Config, config_path: Path, prefix: Path, checkout: Path) -> str:
    source = (checkout / "cron.d" / CRON_FILE).read_text(encoding="utf-8")
    text = substitute(source, substitutions(config, config_path, prefix, checkout))
    return f"{MARKER} from {checkout}/cron.d/{CRON_FILE}; `memstrata uninstall` removes it.\n{text}"


# ---------------------------------------------------------------- systemd


@dataclass(frozen=True)
class Systemd:
    """How to reach systemd: the running one, an offline tree (destdir), or none."""

    systemctl: str | None
    destdir: Path

    @classmethod
    def detect(cls, destdir: Path) -> Systemd:
        return cls(shutil.which("systemctl"), destdir)

    @property
    def offline(self) -> bool:
        return self.destdir != Path("/")

    @property
    def running(self) -> bool:
        # sd_booted(3): systemd is PID 1 exactly when this directory exists
        return not self.offline and os.path.isdir("/run/systemd/system")

    @property
    def state(self) -> str:
        if self.offline:
            return "destdir"
        if self.systemctl is None:
            return "no systemctl"
        return "running" if self.running else "not running"

    def command(self, *args: str) -> list[str]:
        root = [f"--root={self.destdir}"] if self.offline else []
        return [self.systemctl or "systemctl", *root, *args]

    def query(self, *args: str) -> str:
        if self.systemctl is None:
            return ""
        proc = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=60)
        return proc.stdout.strip()

    def run(self, *args: str) -> Callable[[], None]:
        def do() -> None:
            proc = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                why = proc.stderr.strip() or proc.stdout.strip()
                raise InstallError(f"{' '.join(self.command(*args))} failed: {why}")

        return do


# ---------------------------------------------------------------- file actions


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _plan_file(plan: Plan, dest: Path, text: str, mode: int) -> bool:
    """Write ``dest`` unless it already says ``text``; back up a file that is not ours. True when changed."""
    current = _read(dest)
    if current == text:
        if dest.stat().st_mode & 0o777 != mode:
            plan.add("update", dest, f"mode {mode:04o}", lambda: os.chmod(dest, mode))
            return True
        plan.kept.append(f"{dest} (up to date)")
        return False
    if current is not None and not current.startswith(MARKER):
        backup = dest.with_name(f"{dest.name}.bak-{time.strftime('%Y%m%d%H%M%S')}")
        why = f"not written by memstrata install; kept as {backup}"
        plan.add("backup", dest, why, lambda: shutil.copy2(dest, backup))

    def write() -> None:
        dest.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        atomic_write(dest, text, mode=mode)

    plan.add("create" if current is None else "update", dest, f"mode {mode:04o}", write)
    return True


def _plan_remove(plan: Plan, dest: Path) -> bool:
    current = _read(dest)
    if current is None:
        return False
    if not current.startswith(MARKER):
        plan.kept.append(f"{dest} (not written by memstrata install; left alone)")
        return False
    plan.add("remove", dest, "", lambda: dest.unlink(missing_ok=True))
    return True


def _plan_dir(plan: Plan, path: Path, mode: int, workspace: Path | None = None) -> None:
    """Create ``path`` (``mode``, owner root) if missing; inside a workspace without following symlinks."""
    if path.is_dir():
        return
    if workspace is not None and workspace in path.parents:
        rel = path.relative_to(workspace).as_posix()

        def make() -> None:
            os.close(safefs.open_dir(workspace, rel, create=True, mode=mode))

        plan.add("mkdir", path, f"mode {mode:04o}", make)
    elif mode == 0o700:
        plan.add("mkdir", path, "mode 0700", lambda: private_dirs(path))
    else:
        plan.add("mkdir", path, f"mode {mode:04o}", lambda: _makedirs(path, mode))


def _makedirs(path: Path, mode: int) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    os.chmod(path, mode)  # mkdir's mode is cut by the umask


def plan_directories(plan: Plan, config: Config) -> None:
    """Every directory the daemon, the units and the shipped cron lines write to (item: fresh roots work)."""
    paths = config.paths
    _plan_dir(plan, paths.root, 0o755)
    if not paths.workspace.is_dir():
        plan.add("create", paths.workspace, "main workspace from the template, with git", lambda: _main(config))
    _plan_dir(plan, paths.agents_dir, 0o755, paths.workspace)
    _plan_dir(plan, paths.audit_dir, 0o750, paths.workspace)
    _plan_dir(plan, paths.state_dir, 0o700)
    _plan_dir(plan, paths.socket.parent, 0o750)


def _main(config: Config) -> None:
    create_workspace(config, MAIN_AGENT)


def make_directories(config: Config) -> list[Action]:
    """Create what :func:`plan_directories` lists (for ``init``); what it did."""
    plan = Plan()
    plan_directories(plan, config)
    plan.execute(dry_run=False)
    return plan.actions


def plan_skills(plan: Plan, config: Config, config_path: Path, prefix: Path, checkout: Path) -> None:
    """The skill (and, in the main workspace, the example registry) in every agent's workspace."""
    agents = {a.id: a.workspace for a in discover(config)}
    agents.setdefault(MAIN_AGENT, config.paths.workspace)  # created earlier in this plan
    python = prefix / "bin" / "python"
    for agent_id, workspace in sorted(agents.items()):
        launcher = skill.Launcher(str(python), str(checkout), str(config_path), agent_id)
        target = workspace / skill.SKILL_REL
        if not workspace.is_dir():
            changes = ["every file of the skill"]
        else:
            try:
                changes = skill.sync_skill(workspace, launcher, dry_run=True, checkout=checkout)
            except safefs.UnsafePathError as exc:
                plan.warnings.append(f"skill not installed for {agent_id}: {exc}")
                continue
        if changes:
            plan.add(
                "install",
                target,
                "; ".join(changes),
                functools.partial(skill.sync_skill, workspace, launcher, checkout=checkout),
            )
        else:
            plan.kept.append(f"{target} (up to date)")
    registry = config.paths.registry
    if not os.path.lexists(registry):
        plan.add(
            "create",
            registry,
            "the commented example registry",
            lambda: skill.seed_registry(config.paths.workspace, registry, checkout=checkout) and None,
        )
    else:
        plan.kept.append(f"{registry} (existing registry; never rewritten by install)")
        try:
            load_registry(registry)
        except (ValueError, OSError) as exc:
            plan.warnings.append(f"the daemon will refuse to start until the registry is fixed: {exc}")


# ---------------------------------------------------------------- install / uninstall


def _load_existing(config_path: Path, root: Path | None, plan: Plan) -> Config:
    config = load_config(config_path)
    if root is not None and config.paths.root != root:
        raise InstallError(
            f"{config_path} already exists and its root is {config.paths.root}, not {root}: "
            f"run install with --root {config.paths.root}, or move {config_path} away to have a new one written"
        )
    if not os.path.isabs(os.path.expanduser(config.file.paths.root)):
        plan.warnings.append(
            f"{config_path}: paths.root is relative ({config.file.paths.root!r}), so every path lies under "
            f"{config.paths.root}; write an absolute root (or move the file away and run install again)"
        )
    plan.kept.append(f"{config_path} (existing configuration; not rewritten)")
    return config


def plan_install(
    root: Path | None = None,
    config_path: Path = DEFAULT_CONFIG,
    *,
    cron: bool = False,
    destdir: Path = Path("/"),
    prefix: Path | None = None,
    checkout: Path = CHECKOUT,
    units_dir: Path | None = None,
    state_dir: Path | None = None,
) -> Plan:
    """Everything ``memstrata install`` would do, nothing done yet.

    ``units_dir``: the unit files (and with ``cron`` the cron file) go there and systemd is not
    asked; ``state_dir``: a new configuration's state directory (its socket beside it, in
    ``run/``). With both, and ``--root``/``--config`` in a scratch tree, nothing outside it is written.
    """
    prefix = prefix or Path(sys.prefix)
    config_path = config_path.expanduser().absolute()
    _check_path("--config", config_path)
    if root is not None:
        root = root.expanduser()
        _check_path("--root", root)
    for what, given in (("--units-dir", units_dir), ("--state-dir", state_dir)):
        if given is not None:
            _check_path(what, given.expanduser().absolute())
    units_dir = units_dir.expanduser().absolute() if units_dir else None
    state_dir = state_dir.expanduser().absolute() if state_dir else None
    _check_path("the virtualenv", prefix)
    _check_path("the checkout", checkout)
    if not (prefix / "bin" / "memstrata").exists():
        raise InstallError(f"{prefix}/bin/memstrata not found: run install with the virtualenv's memstrata")
    systemd = Systemd(None, destdir) if units_dir else Systemd.detect(destdir)
    plan = Plan(systemd="not asked" if units_dir else systemd.state)

    # configuration
    if config_path.exists():
        config = _load_existing(config_path, root, plan)
    else:
        text = install_config_text(root or DEFAULT_ROOT, config_path, destdir, state_dir)
        config = parse_config(text, config_path)
        if not config_path.parent.is_dir():
            plan.add("mkdir", config_path.parent, "mode 0750", lambda: _makedirs(config_path.parent, 0o750))
        plan.add("create", config_path, "mode 0640, absolute paths", lambda: atomic_write(config_path, text, 0o640))
    for what, path in (("paths.root", config.paths.root), ("paths.workspace", config.paths.workspace)):
        _check_path(f"{config_path}: {what}", path)

    plan_directories(plan, config)
    plan_skills(plan, config, config_path, prefix, checkout)

    if state_dir is not None and config.paths.state_dir != state_dir:
        plan.warnings.append(f"--state-dir: the existing {config_path} names {config.paths.state_dir}; kept")

    # units, timers or cron
    unit_dir = units_dir or _under(destdir, UNIT_DIR)
    wanted = [MAIN_UNIT] if cron else list(ALL_UNITS)
    units_changed = False
    disable = [u for u in TIMERS if cron and (_read(unit_dir / u) or "").startswith(MARKER)]
    if disable and systemd.systemctl:
        plan.add(
            "run",
            " ".join(systemd.command("disable", *disable)),
            "--cron: the timers give way to cron",
            systemd.run("disable", *([] if systemd.offline or not systemd.running else ["--now"]), *disable),
        )
    for name in ALL_UNITS:
        dest = unit_dir / name
        if name in wanted:
            units_changed |= _plan_file(plan, dest, render_unit(name, config, config_path, prefix, checkout), 0o644)
        else:
            units_changed |= _plan_remove(plan, dest)
    cron_dest = (units_dir or _under(destdir, CRON_DIR)) / CRON_FILE
    if units_dir is not None and not units_dir.is_dir():
        made = units_dir  # first of all: the unit files are written into it
        plan.actions.insert(0, Action("mkdir", str(made), "mode 0755", lambda: _makedirs(made, 0o755)))
    if cron:
        _plan_file(plan, cron_dest, render_cron(config, config_path, prefix, checkout), 0o644)
    else:
        _plan_remove(plan, cron_dest)

    # systemd
    if units_dir is not None:
        plan.warnings.append(
            f"--units-dir: the unit files are in {units_dir}; systemd was not asked (copy them to "
            f"/{UNIT_DIR} and run `systemctl daemon-reload` to use them)"
        )
        plan.next_steps = [f"ls {units_dir}", f"memstrata --config {config_path} run  # in the foreground"]
        return plan
    if systemd.systemctl is None:
        plan.warnings.append("systemctl not found: the unit files are written, nothing is enabled")
    else:
        if units_changed and systemd.running:
            plan.add("run", " ".join(systemd.command("daemon-reload")), "", systemd.run("daemon-reload"))
        for unit in [MAIN_UNIT] if cron else [MAIN_UNIT, *TIMERS]:
            enabled = systemd.query("is-enabled", unit) == "enabled"
            now = unit in TIMERS and systemd.running
            active = now and systemd.query("is-active", unit) == "active"
            if not enabled or (now and not active):
                args = ["enable", "--now", unit] if now else ["enable", unit]
                plan.add("run", " ".join(systemd.command(*args)), "", systemd.run(*args))
        if systemd.state == "not running":
            plan.warnings.append(
                "systemd is not running here (no /run/systemd/system): files are written and the units enabled "
                "for the next boot; daemon-reload and starting are skipped (exit status 3)"
            )
    plan.next_steps = ["systemctl start memstrata", "systemctl status memstrata", "journalctl -u memstrata -f"]
    return plan


def plan_uninstall(config_path: Path = DEFAULT_CONFIG, *, destdir: Path = Path("/")) -> Plan:
    """Everything ``memstrata uninstall`` would do: units, timers, cron file and skill code go; data stays."""
    config_path = config_path.expanduser().absolute()
    systemd = Systemd.detect(destdir)
    plan = Plan(systemd=systemd.state)
    unit_dir = _under(destdir, UNIT_DIR)
    ours = [u for u in ALL_UNITS if (_read(unit_dir / u) or "").startswith(MARKER)]
    enabled = [u for u in ours if u in (MAIN_UNIT, *TIMERS)]
    if enabled and systemd.systemctl:
        now = ["--now"] if systemd.running else []
        args = ["disable", *now, *enabled]
        plan.add("run", " ".join(systemd.command(*args)), "", systemd.run(*args))
    removed = False
    for name in ALL_UNITS:
        removed |= _plan_remove(plan, unit_dir / name)
    _plan_remove(plan, _under(destdir, CRON_DIR) / CRON_FILE)
    if removed and systemd.running:
        plan.add("run", " ".join(systemd.command("daemon-reload")), "", systemd.run("daemon-reload"))
    try:
        config = load_config(config_path)
    except (ValueError, OSError) as exc:
        plan.warnings.append(f"skill code left in the workspaces: cannot read the configuration ({exc})")
        return plan
    for agent in discover(config):
        try:
            changes = skill.remove_skill(agent.workspace, dry_run=True)
        except safefs.UnsafePathError as exc:
            plan.warnings.append(f"skill left for {agent.id}: {exc}")
            continue
        if changes:
            plan.add(
                "remove",
                agent.workspace / skill.SKILL_REL,
                "; ".join(changes),
                functools.partial(skill.remove_skill, agent.workspace),
            )
    paths = config.paths
    plan.kept += [
        f"{config_path} (configuration)",
        f"{paths.state_dir} (state: tokens, L4 store, backups)",
        f"{paths.workspace} and {paths.agents_dir} (workspaces, their git history)",
        f"{paths.registry} (project registry)",
        f"{Path(paths.index_template).parent} (L3 indexes)".replace("{agent}", "*"),
    ]
    return plan
