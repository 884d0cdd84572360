"""The judge of workspace paths (daemon/common/workspace_guard.py) against generated hostile paths.

A real tree: OpenClaw's root with the state directory, the main workspace, the agents directory
and memstrata's own spokes in it, an OpenClaw-layout workspace, memstrata's index directory, a
home directory, free directories (one owned by another uid) and symlinks at every depth (to the
agents directory, to a spoke, to OpenClaw's root, to ``/etc``, to ``/``, a loop back up).
Hypothesis builds paths from them with ``..`` and ``.``, symlinked parents at any depth, nesting
inside and around the workspaces, the guarded places and the system directories, and names them
for different agents, by different owners. The judge (device and inode) must agree with an
independent statement of the rule on real-path strings: a path is accepted only when what it
resolves to is no other agent's workspace, lies inside none (except memstrata's own
``agents_dir/<id>-workspace``, and a direct child of the main workspace that is none of main's own
folders: OpenClaw's ``<agents.defaults.workspace>/<id>``) and holds none, is no guarded place,
holds none, lies inside no system tree, and is owned by whoever named it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.common import workspace_guard as guard
from daemon.common.tokens import TokenOfAnotherAgentError, TokenStore, read_workspace_token
from daemon.common.workspaces import MAIN_OWN_DIRS

FOREIGN_UID = 4242
NAMES = [
    "..",
    ".",
    "oc",
    "state",
    "workspace",
    "agents",
    "beta-workspace",
    "alpha-workspace",
    "zeta-workspace",
    "memory",
    "workspace-delta",
    "research",
    "epsilon",
    ".hidden",
    "beta",
    "free",
    "a",
    "b",
    "deep",
    "x",
    "up",
    "foreign",
    "home-of-someone",
    "links",
    "to_agents",
    "to_beta",
    "to_oc",
    "to_free",
    "to_etc",
    "to_root",
    "etc",
    "usr",
    "lib",
    "tmp",
    "var",
]


class Tree:
    """The directories of one configuration, and the places and workspaces taken in it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.oc = base / "oc"
        self.state = self.oc / "state"
        self.main = self.oc / "workspace"
        self.agents_dir = self.main / "agents"
        self.beta = self.agents_dir / "beta-workspace"
        self.alpha = self.agents_dir / "alpha-workspace"
        self.delta = self.oc / "workspace-delta"
        self.epsilon = self.main / "epsilon"  # OpenClaw's <agents.defaults.workspace>/<id>: nested in main's
        self.index_dir = self.oc / "agents"
        self.home = base / "home-of-someone"
        nested = (self.epsilon / "memory", self.main / "research" / "deeper", self.main / ".hidden")
        for d in (self.state, self.beta / "memory", self.alpha, self.main / "memory", self.delta, self.home, *nested):
            d.mkdir(parents=True, exist_ok=True)
        (self.index_dir / "beta" / "memstrata").mkdir(parents=True, exist_ok=True)
        free = base / "free"
        for d in ("a", "b", "deep/x/y", "foreign/inner"):
            (free / d).mkdir(parents=True, exist_ok=True)
        os.chown(free / "foreign", FOREIGN_UID, FOREIGN_UID)
        (free / "deep" / "x" / "up").symlink_to("../../..")  # back to base, two levels down
        (free / "a" / "file.md").write_text("not a directory\n")
        links = base / "links"
        links.mkdir()
        for name, target in {
            "to_agents": self.agents_dir,
            "to_beta": self.beta,
            "to_oc": self.oc,
            "to_free": free,
            "to_etc": Path("/etc"),
            "to_root": Path("/"),
        }.items():
            (links / name).symlink_to(target)
        (self.delta / "to_beta").symlink_to(self.beta)  # a symlink inside a workspace
        self.anchors = [base, self.oc, free, links, self.main, self.agents_dir, self.beta, self.home]
        self.anchors += [Path(p) for p in ("/", "/etc", "/usr", "/tmp", "/var", "/proc", "/root")]

    def places(self) -> guard.Places:
        home = guard.resolve(self.home)
        assert home is not None
        places = guard.Places.of(
            workspace=self.main,
            agents_dir=self.agents_dir,
            state_dir=self.state,
            root=self.oc,
            index_template=f"{self.oc}/agents/{{agent}}/memstrata/index.sqlite",
            main_names=MAIN_OWN_DIRS,
            extra=[guard.Place("the home directory of someone", home, True)],
            homes=False,
        )
        taken = [("main", self.main), ("alpha", self.alpha), ("beta", self.beta), ("delta", self.delta)]
        for agent_id, path in [*taken, ("epsilon", self.epsilon)]:
            found = places.judge(agent_id, path)
            assert found is not None, agent_id
            places.take(agent_id, found)
        return places


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return Tree(tmp_path_factory.mktemp("judge"))


def _within(inner: str, outer: str) -> bool:
    return inner != outer and (outer == "/" or inner.startswith(outer + "/"))


def _nested_in_main(tree: Tree, real: str) -> bool:
    """A direct child of the main workspace that is none of main's own folders (nor hidden)."""
    name = os.path.basename(real)
    return os.path.dirname(real) == str(tree.main) and not name.startswith(".") and name not in MAIN_OWN_DIRS


def _expected(tree: Tree, agent_id: str, given: str, owner: int | None) -> str:
    """``accept``, ``none`` (no directory there) or ``refuse``: the rule on real-path strings."""
    try:
        st_given = os.lstat(given)
    except (FileNotFoundError, NotADirectoryError):
        return "none"
    except OSError:
        return "refuse"  # a symlink loop in a parent: not looked through
    if os.path.islink(given):
        return "refuse"
    if not os.path.isdir(given):
        return "none"
    del st_given
    real = os.path.realpath(given)
    taken = {
        "main": str(tree.main),
        "alpha": str(tree.alpha),
        "beta": str(tree.beta),
        "delta": str(tree.delta),
        "epsilon": str(tree.epsilon),
    }
    agents_dir = str(tree.agents_dir)
    own = os.path.dirname(real) == agents_dir and os.path.basename(real) == f"{agent_id}-workspace"
    others = {k: v for k, v in taken.items() if k != agent_id}
    guarded = [(str(tree.state), False), (str(tree.oc), True), (agents_dir, False), (str(tree.index_dir), False)]
    guarded.append((str(tree.home), True))
    for name in guard.SYSTEM_DIRS:
        if os.path.isdir(name):
            guarded.append((os.path.realpath(name), name not in guard.SYSTEM_TREES))
    if real in others.values() or real in {g for g, _ in guarded}:
        return "refuse"
    for other, workspace in others.items():
        in_main = other == "main" and _nested_in_main(tree, real)
        if _within(real, workspace) and not (own and _within(agents_dir, workspace)) and not in_main:
            return "refuse"
        layout = os.path.dirname(workspace) == agents_dir and os.path.basename(workspace) == f"{other}-workspace"
        holds_nested = real == str(tree.main) and _nested_in_main(tree, workspace)
        if _within(workspace, real) and not (layout and _within(agents_dir, real)) and not holds_nested:
            return "refuse"
    for place, inside_ok in guarded:
        if _within(real, place) and not inside_ok and not (place == agents_dir and own):
            return "refuse"
        if _within(place, real) and not (real == str(tree.main) and place == agents_dir):
            return "refuse"
    if owner is not None and os.stat(real).st_uid != owner:
        return "refuse"
    return "accept"


def _judged(places: guard.Places, agent_id: str, given: str, owner: int | None) -> str:
    namer = guard.Namer(owner, Path("/somewhere/openclaw.json")) if owner is not None else None
    try:
        found = places.judge(agent_id, Path(given), namer)
    except guard.WorkspaceRefusedError as exc:
        assert exc.agent_id == agent_id and exc.reason and str(exc).startswith(f"workspace {Path(given)} of agent")
        return "refuse"
    if found is None:
        return "none"
    assert str(found.real) == os.path.realpath(given), "accepted by what it resolves to"
    return "accept"


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    anchor=st.integers(min_value=0, max_value=14),
    parts=st.lists(st.sampled_from(NAMES), max_size=6),
    agent_id=st.sampled_from(["gamma", "gamma", "beta", "zeta"]),
    owner=st.sampled_from([None, 0, FOREIGN_UID]),
)
def test_the_judge_accepts_only_paths_that_resolve_somewhere_safe(tree, anchor, parts, agent_id, owner):
    given_path = os.path.join(str(tree.anchors[anchor]), *parts)
    assert _judged(tree.places(), agent_id, given_path, owner) == _expected(tree, agent_id, given_path, owner)


@pytest.mark.parametrize(
    ("agent_id", "rel", "owner", "reason"),
    [
        ("gamma", "links/to_agents/beta-workspace", None, "is agent beta's workspace"),
        ("gamma", "free/deep/x/up/oc/workspace/agents/beta-workspace", None, "is agent beta's workspace"),
        ("gamma", "links/to_beta/memory", None, "lies inside agent beta's workspace"),
        ("gamma", "oc/workspace-delta/to_beta", None, "is a symbolic link"),
        ("gamma", "links/to_agents", None, "is a symbolic link"),
        ("gamma", "links/to_oc/workspace/agents", None, "is the agents directory"),
        ("gamma", "links/to_oc/state", None, "is the state directory"),
        ("gamma", "links/to_oc", None, "is a symbolic link"),
        ("gamma", "oc", None, "is OpenClaw's state directory"),
        ("gamma", "oc/agents/beta", None, "lies inside memstrata's index directory"),
        ("gamma", "links/to_oc/..", None, "holds agent"),
        ("gamma", "links/to_etc/..", None, "is the system directory /"),
        ("gamma", "links/to_root/etc", None, "is the system directory /etc"),
        ("gamma", "links/to_root/usr/share", None, "lies inside the system directory /usr"),
        ("gamma", "home-of-someone", None, "is the home directory of someone"),
        ("gamma", "free/a", FOREIGN_UID, f"is owned by uid 0, not by uid {FOREIGN_UID}"),
        ("gamma", "free/foreign", 0, f"is owned by uid {FOREIGN_UID}, not by uid 0"),
        ("gamma", "oc/workspace/memory", None, "lies inside agent main's workspace"),  # main's own folder
        ("gamma", "oc/workspace/.hidden", None, "lies inside agent main's workspace"),
        ("gamma", "oc/workspace/research/deeper", None, "lies inside agent main's workspace"),  # not a direct child
        ("gamma", "oc/workspace/epsilon/memory", None, "lies inside agent epsilon's workspace"),
        ("gamma", "links/to_oc/workspace/epsilon", None, "is agent epsilon's workspace"),
    ],
)
def test_each_refusal_says_why(tree, agent_id, rel, owner, reason):
    namer = guard.Namer(owner, Path("/somewhere/openclaw.json")) if owner is not None else None
    with pytest.raises(guard.WorkspaceRefusedError) as refused:
        tree.places().judge(agent_id, tree.base / rel, namer)
    assert refused.value.reason.startswith(reason), refused.value.reason


@pytest.mark.parametrize(
    ("agent_id", "rel", "owner"),
    [
        ("gamma", "free/a", None),
        ("gamma", "free/a", 0),
        ("gamma", "free/foreign", FOREIGN_UID),
        ("gamma", "links/to_free/deep/x", None),  # a symlinked parent to a safe place is fine
        ("gamma", "home-of-someone/../free/b", None),
        ("beta", "links/to_agents/beta-workspace", None),  # beta's own, however spelled
        ("zeta", "free/deep/x/y", None),
        ("gamma", "oc/workspace/research", None),  # OpenClaw's <agents.defaults.workspace>/<id>, nested in main's
        ("gamma", "links/to_oc/workspace/research", 0),
    ],
)
def test_safe_paths_are_accepted_by_their_real_path(tree, agent_id, rel, owner):
    namer = guard.Namer(owner, Path("/somewhere/openclaw.json")) if owner is not None else None
    found = tree.places().judge(agent_id, tree.base / rel, namer)
    assert found is not None and found.real == Path(os.path.realpath(tree.base / rel))


def test_a_token_of_another_agent_is_never_replaced(tmp_path):
    """Two ids reaching one workspace: the second never takes the first one's token (nor its identity)."""
    store = TokenStore(tmp_path / "state")
    workspace = tmp_path / "beta-workspace"
    workspace.mkdir()
    assert store.ensure("beta", workspace)
    token_file = workspace / ".memstrata" / "token"
    before = (token_file.read_bytes(), os.lstat(token_file).st_ino)
    for call in (store.ensure, store.issue):
        with pytest.raises(TokenOfAnotherAgentError, match="holds agent beta's token"):
            call("gamma", workspace)
    assert (token_file.read_bytes(), os.lstat(token_file).st_ino) == before
    assert store.identify(read_workspace_token(workspace)) == "beta"
    assert not store.ensure("beta", workspace), "beta's own token is kept as it is"
    store.issue("beta", workspace)  # beta's own new token (`memstrata agent token beta`) is fine
    assert store.identify(read_workspace_token(workspace)) == "beta"
