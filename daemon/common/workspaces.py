"""Agents and their workspaces: discovery, lookup, creation from the template.

The main agent lives in ``paths.workspace``; every spoke agent in
``paths.agents_dir/<id>-workspace``, or where OpenClaw's layout puts it
(daemon/common/openclaw.py).  Every workspace, from whichever source, is judged on where its
path resolves before anyone uses it (:func:`survey`, daemon/common/workspace_guard.py): one that
is, holds or lies inside another agent's workspace, the agents or state directory or a system
directory is refused, said once, and never written.  Which files of a workspace are memory (and
so watched, versioned and indexed) is decided here, once, for everyone.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from daemon.common import openclaw
from daemon.common.domain_errors import UnknownAgentError  # defined with the domain errors, raised here
from daemon.common.tokens import WORKSPACE_TOKEN
from daemon.common.workspace_guard import Namer, Places, Resolved, WorkspaceRefusedError
from layers.common import safefs
from layers.common.ids import MAIN_AGENT, check_id, is_valid_id
from layers.core import bundle as core
from layers.daily import LONG_TERM_FILE, MEMORY_DIR

if TYPE_CHECKING:
    from collections.abc import Mapping

    from daemon.common.config import Config
    from daemon.common.config_cache import Paths
    from layers.daily.workspace_repo import WorkspaceRepo

# The git side of L2 (layers/daily/workspace_repo.py, ~10 ms of imports) is imported where a workspace is
# created or its repository opened: finding an agent (every `memstrata search` and `add`) needs none of it.

WORKSPACE_SUFFIX = "-workspace"
TOKEN_DIR = WORKSPACE_TOKEN.parent.as_posix()  # ".memstrata": the agent's token
TEMPLATE_ENV = "MEMSTRATA_TEMPLATE"

log = logging.getLogger(__name__)


class WithPaths(Protocol):
    """What finding an agent reads of a configuration: its resolved paths (a front call to a running
    daemon has only these: daemon/common/config_cache.py ``FrontConfig``)."""

    @property
    def paths(self) -> Paths: ...


# Paths whose changes are committed (L1 and L2); everything else in a workspace
# (skills, logs, caches) belongs to other tools.
MEMORY_FILES = (*core.CORE_FILES, LONG_TERM_FILE)
MEMORY_DIRS = (MEMORY_DIR, core.SHARED_DIR)
PATHSPECS = (*MEMORY_FILES, *MEMORY_DIRS)
# Folders of the main workspace that are main's own: no agent's workspace nested in main's is one of
# them (the skill and its registry, the audit log, memstrata's agents directory, OpenClaw's state).
MAIN_OWN_DIRS = (*MEMORY_DIRS, "skills", "logs", "agents", "state", "memstrata")

# Editors write these next to the file they save; they are never memory.
_TEMP_SUFFIXES = (".swp", ".swx", ".swo", ".tmp", "~", ".part", ".crdownload")
_TEMP_PREFIXES = (".#", ".goutputstream-", "#")


@dataclass(frozen=True)
class Agent:
    id: str
    workspace: Path
    index: Path


def is_editor_temp(name: str) -> bool:
    """Swap, backup and atomic-save temp files of common editors (and vim's ``4913`` probe)."""
    return name == "4913" or name.endswith(_TEMP_SUFFIXES) or name.startswith(_TEMP_PREFIXES)


def is_memory_path(rel: str) -> bool:
    """True for a workspace-relative path that L1/L2 own (and so is versioned)."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or is_editor_temp(parts[-1]):
        return False
    if len(parts) == 1:
        return parts[0] in MEMORY_FILES
    return parts[0] in MEMORY_DIRS and ".git" not in parts


@dataclass(frozen=True)
class Survey:
    """Every agent whose workspace may be used, and every workspace path refused (and why)."""

    agents: list[Agent]
    refused: list[WorkspaceRefusedError]

    def agent(self, agent_id: str) -> Agent | None:
        return next((a for a in self.agents if a.id == agent_id), None)

    def refusal(self, agent_id: str) -> WorkspaceRefusedError | None:
        return next((r for r in self.refused if r.agent_id == agent_id), None)


_said: set[str] = set()


def say_refused(refusal: WorkspaceRefusedError) -> None:
    """One log line per refusal and process: a reconcile every few minutes repeats nothing."""
    text = str(refusal)
    if text not in _said:
        _said.add(text)
        log.warning("%s; not watched, nothing written there", text, extra={"event": "workspace_refused"})


def places_of(paths: Paths) -> Places:
    """The places no workspace may be, of a configuration's paths (daemon/common/workspace_guard.py)."""
    return Places.of(
        workspace=paths.workspace,
        agents_dir=paths.agents_dir,
        state_dir=paths.state_dir,
        root=paths.root,
        index_template=paths.index_template,
        main_names=MAIN_OWN_DIRS,
    )


def survey(config: WithPaths, watched: Mapping[str, Resolved] | None = None) -> Survey:
    """Every agent, in the order that decides who keeps a contested directory: the main agent
    (when its workspace exists), every valid ``agents_dir/*-workspace``, then OpenClaw's own agents
    (``root/workspace-<id>``, ``openclaw.json``) whose id is not already found. Each workspace is
    judged on where it resolves (by device and inode) against the ones before it and the places
    no workspace may be; OpenClaw's are then used by their real path, so a symlinked parent
    swapped later does not move them. ``watched``: the workspaces a daemon watches already, which
    keep their directories (the first found keeps it, across looks too)."""
    paths = config.paths
    places = places_of(paths)
    for agent_id, where in (watched or {}).items():
        places.take(agent_id, where)
    agents: list[Agent] = []
    refused: list[WorkspaceRefusedError] = []

    def consider(agent_id: str, path: Path, named_by: Namer | None = None) -> None:
        try:
            found = places.judge(agent_id, path, named_by, follow_link=agent_id == MAIN_AGENT)
        except WorkspaceRefusedError as exc:
            say_refused(exc)
            refused.append(exc)
            return
        if found is None:
            return  # no directory there (yet): found once it is made
        places.take(agent_id, found)
        where = found.real if named_by is not None else path
        agents.append(Agent(agent_id, where, paths.index_for(agent_id)))

    consider(MAIN_AGENT, paths.workspace)
    try:
        entries = sorted(os.listdir(paths.agents_dir))
    except OSError:
        entries = []
    for name in entries:
        spoke = spoke_id(name)
        if spoke is not None:
            consider(spoke, paths.agents_dir / name)
    seen = {a.id for a in agents} | {r.agent_id for r in refused}
    for candidate in openclaw.candidates(paths.root):
        if candidate.agent_id in seen:  # an id found before keeps what it was found with
            continue
        if candidate.conflict is not None:  # the roster's two forms disagree: nothing is looked at
            refusal = WorkspaceRefusedError(candidate.agent_id, candidate.path, candidate.conflict)
            say_refused(refusal)
            refused.append(refusal)
            continue
        consider(candidate.agent_id, candidate.path, candidate.named_by)
    return Survey(agents, refused)


def workspace_of(config: WithPaths, agent_id: str) -> Path:
    """``agents_dir/<id>-workspace`` (memstrata's layout), else the workspace OpenClaw's own layout
    gives the id, where it resolves (``root/workspace-<id>`` or ``openclaw.json``), once judged."""
    if agent_id == MAIN_AGENT:
        return config.paths.workspace
    ours = config.paths.agents_dir / f"{agent_id}{WORKSPACE_SUFFIX}"
    if not os.path.lexists(ours):
        theirs = survey(config).agent(agent_id)
        if theirs is not None:
            return theirs.workspace
    return ours


def make_agent(config: WithPaths, agent_id: str) -> Agent:
    return Agent(agent_id, workspace_of(config, agent_id), config.paths.index_for(agent_id))


def discover(config: WithPaths) -> list[Agent]:
    """Every agent whose workspace exists and may be used (:func:`survey`; the refused are logged)."""
    return survey(config).agents


def spoke_id(dirname: str) -> str | None:
    """``alpha-workspace`` → ``alpha``; None for anything that is not a spoke workspace."""
    if not dirname.endswith(WORKSPACE_SUFFIX):
        return None
    agent_id = dirname[: -len(WORKSPACE_SUFFIX)]
    return agent_id if is_valid_id(agent_id) and agent_id != MAIN_AGENT else None


def get_agent(config: WithPaths, agent_id: str) -> Agent:
    """The agent with this id, or an error that lists the agents that do exist (or says why its
    workspace is refused: nothing is ever read or written there)."""
    check_id(agent_id)
    found = survey(config)
    agent = found.agent(agent_id)
    if agent is not None:
        return agent
    refusal = found.refusal(agent_id)
    if refusal is not None:
        raise refusal
    known = ", ".join(a.id for a in found.agents) or "none"
    raise UnknownAgentError(
        f"unknown agent {agent_id!r}: no workspace at {workspace_of(config, agent_id)} (known agents: {known})"
    )


def template_dir() -> Path:
    """``workspace-template/`` of this checkout (or ``$MEMSTRATA_TEMPLATE``)."""
    override = os.environ.get(TEMPLATE_ENV)
    path = Path(override) if override else Path(__file__).resolve().parents[2] / "workspace-template"
    if not path.is_dir():
        raise FileNotFoundError(f"workspace template not found at {path}")
    return path


def copy_template(dest: Path, template: Path | None = None, *, main: bool = False) -> list[str]:
    """Copy template files that ``dest`` lacks; existing files are never overwritten.

    The cluster-wide ``shared/`` core exists once, in the main workspace.  ``dest``
    may be an agent's workspace: nothing is created through a symlink (a
    symlinked ``memory/`` is refused and logged, the rest is still copied), and
    what is created is handed to the workspace's owner.
    """
    template = template or template_dir()
    owner = safefs.owner_of(dest)
    created = []
    for src in sorted(template.rglob("*")):
        rel = src.relative_to(template)
        if not main and rel.parts[0] == core.SHARED_DIR:
            continue
        try:
            if src.is_dir():
                os.close(safefs.open_dir(dest, rel.as_posix(), create=True, owner=owner))
            elif src.name != ".keep":
                if safefs.create_new(dest, rel.as_posix(), src.read_bytes(), owner=owner):
                    created.append(rel.as_posix())
                elif (st := safefs.lstat(dest, rel.as_posix())) is not None and stat.S_ISLNK(st.st_mode):
                    log.warning("not copying the template's %s: %s is a symbolic link (never followed)", rel, rel)
        except safefs.UnsafePathError as exc:
            log.warning("not copying the template's %s: %s", rel, exc)
    return created


def exclude_token_dir(repo: WorkspaceRepo, who: str) -> None:
    """``.memstrata/`` (the agent's token) in the repository's ``.git/info/exclude``: OpenClaw's
    documentation has users push the workspace repository to a remote, and the token must never
    go with it, whoever commits there. The user's ``.gitignore`` is never touched. A symlink
    planted in ``.git`` is refused and said (so is a workspace the daemon may not write); the
    token then stays untracked, as before."""
    try:
        if repo.exclude(f"/{TOKEN_DIR}/"):
            log.info("%s: %s/ excluded from the repository (.git/info/exclude)", who, TOKEN_DIR)
    except OSError as exc:  # a symlink planted in .git (refused), a read-only workspace: never fatal
        log.warning("%s: %s/ not excluded from the repository: %s", who, TOKEN_DIR, exc)


def exclude_nested_workspace(main_repo: WorkspaceRepo, name: str, who: str) -> None:
    """``/<name>/`` in main's ``.git/info/exclude``: an agent's workspace nested in main's
    (OpenClaw's ``<agents.defaults.workspace>/<id>``) is a repository of its own, which main's
    ``git status`` otherwise lists as untracked (``?? research/``) and a user's ``git add -A`` would
    take in as an embedded repository. Main's commits never name it (they name main's memory paths
    only); this keeps the user's own git from doing so. Said, never fatal, like the token's line."""
    try:
        if main_repo.exclude(f"/{name}/"):
            log.info("main: %s/ (agent %s's workspace) excluded from main's repository (.git/info/exclude)", name, who)
    except OSError as exc:
        log.warning("main: %s/ (agent %s's workspace) not excluded from main's repository: %s", name, who, exc)


def initial_commit(workspace: Path, config: Config) -> None:
    from layers.daily.workspace_repo import commit_message

    repo = workspace_repo(config, workspace)
    repo.ensure()
    exclude_token_dir(repo, str(workspace))
    changes = repo.changes([*PATHSPECS, ".gitignore"])
    if changes:
        repo.commit([c.path for c in changes], commit_message(changes, "start workspace with"))


def create_workspace(config: Config, agent_id: str) -> tuple[Agent, bool]:
    """Create (or complete) an agent's workspace from the template, with git.

    A new spoke workspace is assembled in a temporary directory and renamed into
    place, so a running daemon discovers it complete, repository and all.
    Returns the agent and whether anything was created.
    """
    import shutil
    import tempfile

    check_id(agent_id)
    agent = make_agent(config, agent_id)
    if os.path.lexists(agent.workspace):
        judged = survey(config)
        refusal = judged.refusal(agent_id)
        if refusal is not None:
            raise refusal
        if judged.agent(agent_id) is None:
            raise WorkspaceRefusedError(agent_id, agent.workspace, "is not a directory")
    if agent.workspace.is_dir():
        created = copy_template(agent.workspace, main=agent_id == MAIN_AGENT)
        if created or not (agent.workspace / ".git").exists():
            initial_commit(agent.workspace, config)
        return agent, bool(created)
    agent.workspace.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".new-{agent_id}-", dir=agent.workspace.parent))
    try:
        copy_template(staging, main=agent_id == MAIN_AGENT)
        initial_commit(staging, config)
        os.rename(staging, agent.workspace)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return agent, True


def core_of(config: Config, agent: Agent, on_demand: bool = False, budget: int | None = None) -> core.CoreBundle:
    """An agent's L1 bundle with the cluster's shared core, at the configured budget unless one is given."""
    return core.load_core(
        agent.id,
        agent.workspace,
        config.paths.workspace / core.SHARED_DIR,
        on_demand=on_demand,
        budget=budget or config.core.budget_tokens,
    )


HISTORY_DIR = (
    "history"  # under state_dir: the daemon's copy of each workspace's history (layers/daily/git/history_copy.py)
)


def history_copy_path(config: Config, agent_id: str) -> Path:
    return config.paths.state_dir / HISTORY_DIR / f"{agent_id}.git"


def copies_in(history_dir: Path) -> list[str]:
    """The agents with a history copy in ``history_dir`` (``<id>.git``), removed agents' included."""
    try:
        names = os.listdir(history_dir)
    except OSError:
        return []
    return sorted(n[:-4] for n in names if n.endswith(".git") and is_valid_id(n[:-4]))


def workspace_repo(config: Config, workspace: Path, agent_id: str | None = None) -> WorkspaceRepo:
    """The git repository of ``workspace`` with the configured author and stale-lock age (one construction).

    With ``agent_id``, every commit made through it is also kept in that agent's
    copy under the state directory, out of the agent's reach.
    """
    from layers.daily.git.history_copy import HistoryCopy
    from layers.daily.workspace_repo import WorkspaceRepo

    copy = HistoryCopy(history_copy_path(config, agent_id)) if agent_id else None
    author = (config.git.author_name, config.git.author_email)
    return WorkspaceRepo(workspace, author, config.git.stale_lock_s, copy)
