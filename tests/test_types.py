"""The code's types hold: mypy, configured in pyproject.toml, finds nothing.

CI runs only ``make test``, so mypy runs here as well as in ``make lint``.  Its
cache (.cache/mypy, see the configuration) makes a second run take seconds; a
fresh clone builds it on the first.  The functions that build the documents of
daemon/common/contracts.py say so in their return types (mypy then checks every
key they write), and mypy is strict on their modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

# (module file, function) -> the contract it returns
BUILDERS = {
    ("daemon/service/snapshot.py", "StatusBoard.read"): "StatusDocument",
    ("daemon/service/snapshot.py", "StatusBoard.while_starting"): "StatusDocument",
    ("daemon/front/status.py", "offline_status"): "StatusDocument",
    ("daemon/files/tracker.py", "AgentTracker.report"): "AgentReport",
    ("daemon/local/indexer.py", "Indexer.report"): "IndexReport",
    ("daemon/conversation/status_section.py", "conversation_status"): "ConversationStatus",
    ("daemon/conversation/status_section.py", "queue_status"): "QueueStatus",
    ("daemon/conversation/broker.py", "Broker.status"): "ConversationStatus",
    ("daemon/local/search.py", "LocalSearch.search"): "SearchAnswer",
    ("layers/local/ranking/hybrid_search.py", "Answer.to_dict"): "SearchAnswer",
    ("layers/local/storage/index.py", "LocalIndex.stats"): "IndexStats",
}


def test_mypy_reports_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-color-output", "--no-error-summary"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"mypy (configured in pyproject.toml) reports:\n{proc.stdout}{proc.stderr}"


def _returns(path: str, qualname: str) -> str | None:
    """The return annotation of ``qualname`` in ``path``, as written; None when it is not found."""
    tree = ast.parse((REPO_ROOT / path).read_text(encoding="utf-8"))
    *owners, name = qualname.split(".")
    body = tree.body
    for owner in owners:
        body = next(node.body for node in body if isinstance(node, ast.ClassDef) and node.name == owner)
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.unparse(node.returns) if node.returns is not None else ""
    return None


@pytest.mark.parametrize(("where", "contract"), BUILDERS.items(), ids=lambda v: v[1] if isinstance(v, tuple) else v)
def test_a_contract_builder_returns_its_contract(where, contract):
    assert _returns(*where) == contract


def test_mypy_is_strict_on_the_contracts_and_their_builders():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    strict = [o for o in config["overrides"] if o.get("disallow_untyped_defs") and o.get("disallow_any_generics")]
    assert len(strict) == 1, "one override spells out strict mode"
    modules = set(strict[0]["module"])
    builders = {path.removesuffix(".py").replace("/", ".") for path, _ in BUILDERS}
    assert (builders - {"layers.local.storage.index"}) | {"daemon.common.*"} <= modules  # the index: default mode
    assert not any(o.get("strict") for o in config["overrides"]), "strict = true in an override is global in mypy"
