"""The project registry: which agents exist, which projects they belong to.

It decides who may read a project's memories, so it is validated as strictly as
the configuration (errors name the key and line) and written atomically under a
lock when ``memstrata agent add`` records an agent.

Membership is the union of ``projects.<p>.members`` and ``agents.<a>.projects``:
people edit whichever side they find first, and ``agent add`` keeps both in step.

A member is an agent id, or on the fleet's hub ``HOST/AGENT`` (each part an agent id): agent AGENT of
host HOST, acting through the hub's peer API (docs/fleet-l4.md).  ``spoke-1/main`` is not ``main``.
Project names stay plain ids.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pydantic
import yaml

from layers.common.fsutil import atomic_write
from layers.common.ids import AGENT_ID_PATTERN, FLEET_MEMBER_PATTERN
from layers.common.yamlfile import Problem, StrictModel, YamlFileError, line_of, read_text, read_yaml, validate

log = logging.getLogger(__name__)

Id = pydantic.constr(pattern=AGENT_ID_PATTERN)  # a project
Member = pydantic.constr(pattern=FLEET_MEMBER_PATTERN)  # an agent: ``id`` or ``host/id``

HEADER = """\
# memstrata project registry: agents, their projects, and who may write public memories.
# `memstrata agent add ID --project P` rewrites this file (comments other than this header are not kept).
# Membership of a project is the union of projects.<p>.members and agents.<a>.projects.
"""


class ProjectEntry(StrictModel):
    description: str = ""
    members: list[Member] = pydantic.Field(default_factory=list)  # type: ignore[valid-type]
    keywords: list[str] = pydantic.Field(default_factory=list)


class AgentEntry(StrictModel):
    projects: list[Id] = pydantic.Field(default_factory=list)  # type: ignore[valid-type]
    can_write_public: bool = False


class RegistryFile(StrictModel):
    version: int = 1
    projects: dict[Id, ProjectEntry] = pydantic.Field(default_factory=dict)  # type: ignore[valid-type]
    agents: dict[Member, AgentEntry] = pydantic.Field(default_factory=dict)  # type: ignore[valid-type]


@dataclass(frozen=True)
class Registry:
    """A validated registry with membership resolved both ways.

    ``document`` is False when the file held none (missing, empty, only comments): what a writer that
    truncates first, or an editor that deletes and recreates, leaves for a moment.  An empty registry
    written on purpose is a document (``agents: {}``, as :func:`add_agent` and the library write it).
    """

    path: Path
    data: RegistryFile
    document: bool = True

    def is_empty(self) -> bool:
        return not self.data.agents and not self.data.projects

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
    """Read and validate the registry; a missing file, or one with no document, is an empty registry."""
    try:
        text = read_text(path)  # bounded, never blocks; see layers.common.yamlfile
    except FileNotFoundError:
        return Registry(path, RegistryFile(), document=False)
    data, node = read_yaml(path, text)
    model = validate(RegistryFile, data, path, node)
    _check_references(model, path, node)
    return Registry(path, model, document=node is not None)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def add_agent(
    path: Path,
    agent: str,
    projects: Iterable[str] = (),
    can_write_public: bool | None = None,
    keywords: Iterable[str] = (),
) -> Registry:
    """Record ``agent`` (and its membership of ``projects``) and rewrite the file atomically.

    ``keywords`` are added to each of ``projects``; a project left without any
    gets its own name, so a memory that names the project is inferred into it.
    """
    keywords = list(keywords)
    with _locked(path):
        current = load_registry(path).data.model_dump()
        entry = current["agents"].setdefault(agent, {"projects": [], "can_write_public": False})
        if can_write_public is not None:
            entry["can_write_public"] = can_write_public
        for project in projects:
            proj = current["projects"].setdefault(project, {"description": "", "members": [], "keywords": []})
            for word in keywords or ([] if proj["keywords"] else [project]):
                if word not in proj["keywords"]:
                    proj["keywords"].append(word)
            if agent not in proj["members"]:
                proj["members"].append(agent)
            if project not in entry["projects"]:
                entry["projects"].append(project)
        validated = RegistryFile.model_validate(current)
        text = HEADER + yaml.safe_dump(validated.model_dump(), sort_keys=False, allow_unicode=True)
        atomic_write(path, text)
        return Registry(path, validated)


Signature = tuple[int, int, int, int, int]


class RegistryCache:
    """The registry as of its last good version, re-read only when the file changes.

    Every request asks for it, so it is parsed once per change of the file's
    (device, inode, size, mtime, ctime), never per request.  A broken or hostile
    edit keeps the previous registry in force (and says why in ``error``, naming
    file and line): a typo must not lock every agent out of its projects, and
    the main agent, which can write the file, must not be able to stall L4.
    So does a file with no document (missing, empty) while the registry in force
    names agents or projects: a writer that truncates first, seen half way, would
    otherwise take every agent out until its next write (issue 46).  The file is
    read again at its next change, which such a writer's next write is.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error = ""
        self._lock = threading.Lock()  # API threads ask concurrently; one of them parses
        self._seen = self._signature()
        self._current = load_registry(path)  # a broken file at start is the caller's error to report

    def _signature(self) -> Signature | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError:
            return (-1, -1, -1, -1, -1)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def current(self) -> Registry:
        if self._signature() == self._seen:
            return self._current
        with self._lock:
            signature = self._signature()
            if signature == self._seen:
                return self._current  # another thread parsed it meanwhile
            try:
                registry = load_registry(self.path)
                if not registry.document and not self._current.is_empty():
                    why = "no longer exists" if signature is None else "holds no YAML document (empty)"
                    self.error = (
                        f"{self.path}: refused: the file {why}, as while an editor writes it; an empty registry is "
                        "written as a document, e.g. 'agents: {}' (the previous registry stays in force)"
                    )
                    log.warning("%s", self.error)
                else:
                    self._current = registry
                    if self.error:
                        log.info("%s: registry is valid again", self.path)
                    self.error = ""
            except YamlFileError as exc:
                self.error = f"{exc} (the previous registry stays in force)"
                log.error("%s", self.error)
            except Exception as exc:  # whatever a hostile file does, the last good one stays
                self.error = f"{self.path}: cannot be used ({exc!r}) (the previous registry stays in force)"
                log.error("%s", self.error)
            self._seen = signature
        return self._current
