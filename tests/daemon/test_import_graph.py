"""The house's import rules, read from the code's own import statements.

Every ``import``/``from … import`` counts: at module level, inside functions, and
under ``if TYPE_CHECKING:`` (a type-only circle is still a circle a reader has to
untangle).  The rules:

- ``layers/`` never imports ``daemon``;
- no circle among the daemon's modules, and none among its rooms;
- ``daemon/common/`` imports no other room (every room depends on it, never the reverse);
- no part of the service imports the front (``daemon/front/``);
- the front imports ``common`` and the operator's tools (``ops``) only, except the named
  offline paths below, each inside the function that needs it (never at module level:
  the front stays light).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOMS = ("common", "front", "service", "api", "files", "local", "conversation", "ops")
SERVICE_PARTS = ("service", "api", "files", "local", "conversation", "ops")

# (front module, module it reaches): why the front runs service code in its own process there.
OFFLINE_PATHS = {
    ("daemon.front.cli", "daemon.service.memory_daemon"): "`memstrata run` runs the daemon in this process",
    ("daemon.front.cli", "daemon.api.app"): "`memstrata run` names a socket already served (SocketInUseError)",
    ("daemon.front.cli", "daemon.service.early_signals"): "`memstrata run` notes SIGHUP/SIGTERM from its start",
    ("daemon.front.local_commands", "daemon.service.memory_daemon"): "`reindex` with the daemon down",
    ("daemon.front.status", "daemon.files.tracker"): "`status` with the daemon down surveys the files itself",
    ("daemon.front.status", "daemon.local.embedding"): "`status` with the daemon down says what the model would do",
    ("daemon.front.maintenance_commands", "daemon.conversation.feed"): (
        "cleanup/consolidate/restore run on the hub's store with its daemon down draw a new feed epoch"
    ),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


def _imports(path: Path, module: str, known: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported module of ``known``, imported at module level) for every import statement in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))}
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append((target, id(node) in top_level))
    return found


@functools.cache
def _graph(package: str) -> dict[str, dict[str, bool]]:
    """module → {imported module: True when at module level}, within ``package``."""
    known = _modules(package)
    graph: dict[str, dict[str, bool]] = {}
    for module, path in known.items():
        edges: dict[str, bool] = {}
        for target, top in _imports(path, module, known):
            edges[target] = edges.get(target, False) or top
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS else None


def test_every_daemon_module_lives_in_a_room():
    loose = [m for m in _graph("daemon") if m.count(".") == 1 and m.split(".")[1] not in (*ROOMS, "__main__")]
    assert loose == [], f"modules outside a room: {loose}"


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_among_the_daemons_modules():
    graph = {m: set(edges) for m, edges in _graph("daemon").items()}
    assert _cycles(graph) == []


def test_no_import_circle_among_the_rooms():
    rooms: dict[str, set[str]] = defaultdict(set)
    for module, edges in _graph("daemon").items():
        source = _room(module)
        for target in edges:
            if source and _room(target) and _room(target) != source and (module, target) not in OFFLINE_PATHS:
                rooms[source].add(_room(target))  # type: ignore[arg-type]
    assert _cycles(dict(rooms)) == [], dict(rooms)


def test_common_imports_no_other_room():
    reached = {
        (module, target)
        for module, edges in _graph("daemon").items()
        if _room(module) == "common"
        for target in edges
        if _room(target) not in (None, "common")
    }
    assert reached == set()


def test_no_part_of_the_service_imports_the_front():
    reached = {
        (module, target)
        for module, edges in _graph("daemon").items()
        if _room(module) in SERVICE_PARTS
        for target in edges
        if _room(target) == "front"
    }
    assert reached == set()


def test_the_front_reaches_the_service_only_by_the_named_offline_paths_inside_functions():
    outside, at_module_level = set(), set()
    for module, edges in _graph("daemon").items():
        if _room(module) != "front":
            continue
        for target, top in edges.items():
            if _room(target) in ("front", "common", "ops", None):
                continue
            if (module, target) not in OFFLINE_PATHS:
                outside.add((module, target))
            elif top:
                at_module_level.add((module, target))
    assert outside == set(), "the front imports the service outside a named offline path"
    assert at_module_level == set(), "an offline path is imported where the command runs, not at module level"
    stale = {path for path in OFFLINE_PATHS if path[1] not in _graph("daemon").get(path[0], {})}
    assert stale == set(), "a named offline path that no longer exists"


def test_layers_never_import_the_daemon():
    offenders = []
    for path in sorted((REPO / "layers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n == "daemon" or n.startswith("daemon.")]
    assert offenders == []


def test_the_protocol_imports_only_the_standard_library_and_itself():
    """protocol/ is a leaf every edge builds on, and the skill runs a copy of it under any python3."""
    import sys

    offenders = []
    for path in sorted((REPO / "protocol").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert not node.level, f"{path.relative_to(REPO)}: no relative imports (import protocol.…)"
                names = [node.module or ""]
            else:
                continue
            top = {n.split(".")[0] for n in names}
            offenders += [
                f"{path.relative_to(REPO)}: {t}"
                for t in sorted(top)
                if t != "protocol" and t not in sys.stdlib_module_names
            ]
    assert offenders == []
    graph = {m: set(edges) for m, edges in _graph("protocol").items()}
    assert _cycles(graph) == []
