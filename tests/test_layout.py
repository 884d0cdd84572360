"""The whole tree's import rules and names: daemon/, layers/ and protocol/ read as one graph.

tests/daemon/test_import_graph.py holds the daemon's room rules; these are the rules across the
packages, read from the same import statements (module level, inside functions, and under
``if TYPE_CHECKING:``: a type-only circle is still a circle a reader has to untangle):

- no import circle anywhere in daemon/, layers/ and protocol/ taken together;
- the layers never import the daemon, and the protocol package imports neither (it is the leaf
  every edge builds on: the layers may use its vocabulary);
- each layer (``core`` L1, ``daily`` L2, ``local`` L3, ``conversation`` L4) imports only itself and
  ``layers.common``; ``layers.common`` imports no layer (so L3 and L4 never import each other);
- inside a layer, its subpackages (L3's text / models / storage / ranking, L4's policy / lifecycle /
  adapters / consolidation, L2's git) import each other in one direction only: no circle among them;
- no two modules share a file name, so a name in a traceback, a docstring or a search says which
  module it is.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from pathlib import Path

from tests.daemon.test_import_graph import _cycles, _imports, _module_name

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("daemon", "layers", "protocol")
LAYERS = ("core", "daily", "local", "conversation")


@functools.cache
def _whole_graph() -> dict[str, set[str]]:
    """module → the modules it imports, across daemon/, layers/ and protocol/."""
    known = {_module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}
    return {module: {target for target, _ in _imports(path, module, known)} for module, path in known.items()}


def _edges(source_prefix: str):
    for module, targets in _whole_graph().items():
        if module == source_prefix or module.startswith(source_prefix + "."):
            for target in sorted(targets):
                yield module, target


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "layers" and len(parts) > 1 else None


def test_no_import_circle_anywhere():
    assert _cycles(_whole_graph()) == []


def test_the_layers_never_import_the_daemon_and_the_protocol_neither():
    """The protocol is the leaf every edge builds on (the layers use its vocabulary); the daemon composes."""
    offenders = [(m, t) for m, t in _edges("layers") if t.split(".")[0] == "daemon"]
    offenders += [(m, t) for m, t in _edges("protocol") if t.split(".")[0] in ("daemon", "layers")]
    assert offenders == []


def test_every_module_of_layers_lives_in_a_layer_or_in_common():
    loose = [m for m in _whole_graph() if _layer(m) not in (None, *LAYERS, "common")]
    assert loose == [], f"modules of layers/ outside a layer and outside layers/common/: {loose}"


def test_a_layer_imports_only_itself_and_common():
    offenders = [
        (module, target)
        for module, target in _edges("layers")
        if _layer(target) is not None and _layer(target) not in (_layer(module), "common")
    ]
    assert offenders == []


def test_common_imports_no_layer():
    assert [(m, t) for m, t in _edges("layers.common") if _layer(t) not in (None, "common")] == []


def test_no_circle_among_the_subpackages_of_a_layer():
    def unit(module: str) -> str:
        return ".".join(module.split(".")[:3])  # layers.local.storage, layers.local.shapes, …

    units: dict[str, set[str]] = defaultdict(set)
    for module, target in _edges("layers"):
        if _layer(module) == _layer(target) and unit(module) != unit(target) and module.count(".") >= 2:
            units[unit(module)].add(unit(target))
    assert _cycles(dict(units)) == [], dict(units)


def test_no_two_modules_share_a_file_name():
    paths = [p for package in PACKAGES for p in (REPO / package).rglob("*.py")]
    names = Counter(p.name for p in paths if p.name not in ("__init__.py", "__main__.py"))
    twice = {n: sorted(str(p.relative_to(REPO)) for p in paths if p.name == n) for n in names if names[n] > 1}
    assert twice == {}


def test_no_module_is_named_like_a_top_level_package():
    """``protocol``, ``daemon``, ``layers``: a module of that name elsewhere reads as the package."""
    clash = [
        str(p.relative_to(REPO))
        for package in PACKAGES
        for p in (REPO / package).rglob("*.py")
        if p.stem in PACKAGES or (p.name == "__init__.py" and p.parent != REPO / package and p.parent.name in PACKAGES)
    ]
    assert clash == []


def test_the_finders_see_the_layers():
    """The graph is read from the tree: a layout change that empties it must not pass unseen."""
    graph = _whole_graph()
    assert {"layers.local.storage.index", "layers.conversation.adapters.store", "protocol.operations"} <= set(graph)
    assert "layers.local.text.tokenizer" in graph["layers.local.storage.index"]
