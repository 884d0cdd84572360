"""The project registry: which agents exist, which projects they belong to.

It decides who may read a project's memories, so it is validated as strictly as
the configuration (errors name the key and line) and written atomically under a
lock when ``memstrata agent add`` records an agent.

Membership is the union of ``projects.<p>.members`` and ``agents.<a>.projects``:
people edit whichever side they find first, and ``agent add`` keeps both in step.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pydantic
import yaml

from layers.fsutil import atomic_write
from layers.ids import AGENT_ID_PATTERN
from layers.yamlfile import Problem, StrictModel, YamlFileError, line_of, read_yaml, validate

Id = pydantic.constr(pattern=AGENT_ID_PATTERN)

HEADER = """\
# memstrata project registry: agents, their projects, and who may write public memories.
# `memstrata agent add ID --project P` rewrites this file (comments other than this header are not kept).
# Membership of a project is the union of projects.<p>.members and agents.<a>.projects.
"""


class ProjectEntry(StrictModel):
    description: str = ""
    members: list[Id] = pydantic.Field(default_factory=list)  # type: ignore[valid-type]
    keywords: list[str] = pydantic.Field(default_factory=list)


class AgentEntry(StrictModel):
    projects: list[Id] = pydantic.Field(default_factory=list)  # type: ignore[valid-type]
    can_write_public: bool = False


class RegistryFile(StrictModel):
    version: int = 1
    projects: dict[Id, ProjectEntry] = pydantic.Field(default_factory=dict)  # type: ignore[valid-type]
    agents: dict[Id, AgentEntry] = pydantic.Field(default_factory=dict)  # type: ignore[valid-type]


@dataclass(frozen=True)
class Registry:
    """A validated registry with membership resolved both ways."""

    path: Path
    data: RegistryFile

    def agent_ids(self) -> list[str]:
        ids = set(self.data.agents)
        for project in self.data.projects.values():
            ids.update(project.members)
        return sorted(ids)

    def projects_of(self, agent: str) -> set[str]:
        mine = set(self.data.agents[agent].projects) if agent in self.data.agents else set()
        mine.update(p for p, entry in self.data.projects.items() if agent in entry.members)
        return mine

    def members_of(self, project: str) -> set[str]:
        entry = self.data.projects.get(project)
        members = set(entry.members) if entry else set()
        members.update(a for a, entry in self.data.agents.items() if project in entry.projects)
        return members

    def can_write_public(self, agent: str) -> bool:
        entry = self.data.agents.get(agent)
        return bool(entry and entry.can_write_public)

    def keywords(self) -> dict[str, list[str]]:
        return {p: list(e.keywords) for p, e in self.data.projects.items()}


def _check_references(data: RegistryFile, path: Path, node: yaml.Node | None) -> None:
    problems = []
    for agent, entry in data.agents.items():
        for i, project in enumerate(entry.projects):
            if project not in data.projects:
                key = ("agents", agent, "projects", i)
                problems.append(
                    Problem(
                        f"agents.{agent}.projects[{i}]",
                        line_of(node, key),
                        f"unknown project {project!r} (declare it under projects:)",
                    )
                )
    if problems:
        raise YamlFileError(path, problems)


def load_registry(path: Path) -> Registry:
    """Read and validate the registry; a missing file is an empty registry."""
    if not path.exists():
        return Registry(path, RegistryFile())
    data, node = read_yaml(path)
    model = validate(RegistryFile, data, path, node)
    _check_references(model, path, node)
    return Registry(path, model)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def add_agent(path: Path, agent: str, projects: Iterable[str] = (), can_write_public: bool | None = None) -> Registry:
    """Record ``agent`` (and its membership of ``projects``) and rewrite the file atomically."""
    with _locked(path):
        current = load_registry(path).data.model_dump()
        entry = current["agents"].setdefault(agent, {"projects": [], "can_write_public": False})
        if can_write_public is not None:
            entry["can_write_public"] = can_write_public
        for project in projects:
            proj = current["projects"].setdefault(project, {"description": "", "members": [], "keywords": []})
            if agent not in proj["members"]:
                proj["members"].append(agent)
            if project not in entry["projects"]:
                entry["projects"].append(project)
        validated = RegistryFile.model_validate(current)
        text = HEADER + yaml.safe_dump(validated.model_dump(), sort_keys=False, allow_unicode=True)
        atomic_write(path, text)
        return Registry(path, validated)


class RegistryCache:
    """The registry as of its last good version, re-read when the file changes.

    A broken edit keeps the previous registry in force (and says why in
    ``error``): a typo must not lock every agent out of its projects.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error = ""
        self._seen: tuple[float, int] | None = None
        self._current = load_registry(path)  # a broken file at start is the caller's error to report
        self._seen = self._signature()

    def _signature(self) -> tuple[float, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime, st.st_size)

    def current(self) -> Registry:
        signature = self._signature()
        if signature != self._seen:
            try:
                self._current = load_registry(self.path)
                self.error = ""
            except YamlFileError as exc:
                self.error = f"{exc} (the previous registry stays in force)"
            self._seen = signature
        return self._current
