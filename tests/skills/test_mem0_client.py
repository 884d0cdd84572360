"""skills/mem0-integration/mem0_client.py as agents run it: any python3, from inside a workspace.

The client runs as a real subprocess under ``python3 -I -S`` (no site-packages
at all, so nothing but the standard library can be imported) against a real
daemon, from inside an agent's workspace with no token in the environment: it
must find the workspace token, the agent id and the socket on its own.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.api.requests import AddRequest, UpdateRequest
from daemon.common.config import demo_config_text, parse_config
from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from protocol import locations
from tests.helpers import FAKE_API_KEY, FAST, DaemonProcess, init_root, run_cli, wait_for
from tests.request_fields import (
    SAMPLES,
    Recorder,
    parsed,
    schema_fields,
)

CLIENT = Path(__file__).resolve().parents[2] / "skills" / "mem0-integration" / "mem0_client.py"
STRICT = ("-I", "-S")  # isolated, and no site: only the standard library is importable
WITH_SITE = ("-I",)  # the system's site-packages (PyYAML, when it is installed there)
DISCOVERY_ENV = ("MEMSTRATA_TOKEN", "MEMSTRATA_AGENT", "MEMSTRATA_SOCKET", "MEMSTRATA_CONFIG")


def system_python() -> str:
    """A python3 that is not this virtualenv's, when the machine has one (the point is: not ours)."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    for candidate in ("/usr/bin/python3", shutil.which("python3", path=path)):
        if candidate and Path(candidate).exists():
            return candidate
    return sys.executable


PYTHON = system_python()


def load_module():
    """The client imported by path (its folder name is not a package name)."""
    spec = importlib.util.spec_from_file_location("mem0_client", CLIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mem0_client = load_module()


class Cluster:
    """One demo root with agents a and b, and the daemon serving it."""

    def __init__(self, root: Path, config: Path, daemon: DaemonProcess) -> None:
        self.root = root
        self.config = config
        self.daemon = daemon

    def workspace(self, agent: str) -> Path:
        return self.root / "workspace" / "agents" / f"{agent}-workspace"

    def client(
        self, *args: str, cwd: Path, env: dict | None = None, flags: tuple[str, ...] = STRICT
    ) -> subprocess.CompletedProcess:
        """Run mem0_client.py as an agent would: its config known, no token in the environment."""
        clean = {k: v for k, v in os.environ.items() if k not in DISCOVERY_ENV}
        clean["MEMSTRATA_CONFIG"] = str(self.config)
        return subprocess.run(
            [PYTHON, *flags, str(CLIENT), *args],
            cwd=cwd,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )

    def json(self, *args: str, cwd: Path, **kwargs) -> dict:
        proc = self.client(*args, "--json", cwd=cwd, **kwargs)
        assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout)


def start_cluster(root: Path, **overrides: dict) -> Cluster:
    config = init_root(root, **{**FAST, **overrides})
    for agent in ("a", "b"):
        run_cli("agent", "add", agent, config=config)
    daemon = DaemonProcess(config).start()
    return Cluster(root, config, daemon)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A daemon whose conversation store (embedded) is reachable; started once for the module."""
    c = start_cluster(tmp_path_factory.mktemp("mem0"))
    try:
        wait_for(lambda: c.daemon.status()["conversation"]["reachable"], timeout=120, what="L4 reachable")
        yield c
    finally:
        c.daemon.stop()


# ---------------------------------------------------------------- no daemon needed


def test_client_imports_only_the_standard_library():
    """Any python3 must run it: every import is stdlib or the protocol package (stdlib only itself, installed
    beside it: tests/daemon/common/test_skill_protocol.py), except PyYAML tried under ImportError."""
    tree = ast.parse(CLIENT.read_text(encoding="utf-8"))
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers
        ):
            guarded.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    outside = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports: it runs as a script"
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "protocol" and id(node) not in guarded:
                outside.append(name)
    assert outside == []


def test_copied_constants_agree_with_the_daemon():
    """What the client still copies (the workspace layout: the daemon's, not the protocol's) is checked here;
    the vocabulary, the limits and the configuration's locations come from the protocol package."""
    from daemon.common.tokens import WORKSPACE_TOKEN
    from daemon.common.workspaces import WORKSPACE_SUFFIX
    from layers.common.ids import MAIN_AGENT

    spec = importlib.util.spec_from_file_location("mem0_client_constants", CLIENT)
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    assert client.WORKSPACE_TOKEN == WORKSPACE_TOKEN and client.WORKSPACE_SUFFIX == WORKSPACE_SUFFIX
    assert client.MAIN_AGENT == MAIN_AGENT


# ---------------------------------------------------------------- mem0's Memory API over the protocol

ADD = schema_fields(AddRequest)
# mem0's metadata keys on Memory.add, as the API's fields
METADATA_AS = {
    "visibility": "visibility",
    "project_id": "project",
    "expiration_date": "expires",
    "memory_type": "type",
    "supersedes": "supersedes",
    "trust": "trust",
    "source": "source",
}


def test_memory_add_and_update_send_mem0s_fields_as_the_apis(tmp_path_factory):
    """mem0's Memory.add (its metadata keys, a turn's role and name) and update reach the daemon under the API's
    names (the skill's command line, like the CLI's and the MCP tools', is driven once per operation in
    tests/daemon/front/test_edges_round_trip.py)."""
    assert set(mem0_client.ADD_METADATA) == set(METADATA_AS) and set(METADATA_AS.values()) <= set(ADD)
    sock = tmp_path_factory.mktemp("recorder") / "daemon.sock"
    with Recorder(sock).serving() as recorder:
        memory = mem0_client.Memory(client=mem0_client.Mem0Client("main", "a token", sock))
        metadata = {key: SAMPLES[field] for key, field in METADATA_AS.items()} | SAMPLES["metadata"]
        turn = {"role": SAMPLES["role"], "content": SAMPLES["text"], "name": SAMPLES["actor_id"]}
        ids = {"user_id": SAMPLES["user_id"], "run_id": SAMPLES["run_id"]}
        sent = recorder.one(lambda: memory.add([turn], metadata=metadata, infer=SAMPLES["infer"], **ids))
        assert (sent.method, sent.path) == ("POST", "/v1/memories")
        assert parsed(AddRequest, sent) == {k: SAMPLES[k] for k in ADD if k != "write_id"}  # mem0's add has none
        sent = recorder.one(
            lambda: memory.update(SAMPLES["memory_id"], SAMPLES["text"], expiration_date=SAMPLES["expires"])
        )
        assert parsed(UpdateRequest, sent) == {"agent": "main", "text": SAMPLES["text"], "expires": SAMPLES["expires"]}
        assert sent.path == f"/v1/memories/{SAMPLES['memory_id']}"


@pytest.mark.parametrize(
    "paths",
    [
        None,  # the demo file as `memstrata init` writes it
        {"root": ".", "socket": "run/m.sock"},  # relative: from the file's directory
        {"root": "/srv/oc", "workspace": '"{root}/ws"', "socket": "'{workspace}/../run/x.sock'"},
        {"root": "~/oc", "socket": "'{root}/s.sock'  # quoted, with a comment"},
        {"root": "/srv/oc"},  # no socket: the daemon's default
    ],
)
def test_fallback_parser_finds_the_socket_the_daemon_uses(tmp_path, paths):
    """Without PyYAML the line parser must agree with daemon/common/config.py on paths.socket."""
    if paths is None:
        text = demo_config_text(tmp_path)
    else:
        lines = "\n".join(f"  {key}: {value}" for key, value in paths.items())
        text = f"version: 1\nwatch:\n  mode: polling\n# comment\npaths:\n{lines}\n\nlog:\n  level: info\n"
    source = tmp_path / "memstrata.yaml"
    expected = parse_config(text, source).paths.socket
    found = locations.resolve_socket(locations.parse_paths_block(text), tmp_path)
    assert found == expected
    assert locations.resolve_socket(mem0_client.parse_paths(text), tmp_path) == expected


@pytest.mark.parametrize(
    ("dirname", "agent"),
    [("alpha-workspace", "alpha"), ("workspace", "main"), ("main-workspace", "main"), ("Bad-workspace", "main")],
)
def test_agent_is_inferred_from_the_workspace_name(dirname, agent):
    assert mem0_client.agent_of_workspace(Path("/x") / dirname) == agent


def test_usage_errors_exit_2(tmp_path):
    for args in ([], ["frobnicate"], ["add"], ["get_all", "--limit", "0"], ["add", "x", "--type", "nonsense"]):
        proc = subprocess.run(
            [PYTHON, *STRICT, str(CLIENT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
        assert proc.returncode == 2, args
        assert "usage:" in proc.stderr


def test_no_daemon_is_a_clear_error_not_a_traceback(tmp_path):
    proc = subprocess.run(
        [PYTHON, *STRICT, str(CLIENT), "status", "--socket", str(tmp_path / "none.sock")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "no daemon socket at" in proc.stderr and "local_search.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_fifo_or_oversized_configuration_is_refused_not_waited_on(tmp_path):
    """A FIFO at the configuration path would block a plain read forever."""
    fifo = tmp_path / "memstrata.yaml"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("# x\n" * 100_000)
    for config, says in ((fifo, "not a regular file"), (big, "the limit is 262,144")):
        proc = subprocess.run(
            [PYTHON, *STRICT, str(CLIENT), "status", "--config", str(config)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 1 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------- against a real daemon


@pytest.mark.parametrize("flags", [STRICT, WITH_SITE], ids=["stdlib-only", "with-site"])
def test_add_then_search_from_inside_the_workspace(cluster, flags):
    """From a subfolder of a's workspace, with no token in the environment, a is a."""
    cwd = cluster.workspace("a") / "memory"
    marker = f"部署了 Qdrant，端口 6333 ({flags[-1]})"
    added = cluster.json("add", marker, "--type", "fact", cwd=cwd, flags=flags)
    assert added["queued"] is False and added["visibility"] == "private" and added["memory_type"] == "fact"
    assert added["expiration_date"] is None, "facts never expire"
    new_id = added["results"][0]["id"]

    found = cluster.json("search", "Qdrant 端口", "--limit", "20", cwd=cwd, flags=flags)
    assert found["degraded"] is False and found["layer"] == "conversation"
    hit = next(r for r in found["results"] if r["id"] == new_id)
    assert hit["memory"] == marker and hit["agent_id"] == "a"

    readable = cluster.client("search", "Qdrant 端口", cwd=cwd, flags=flags)
    assert readable.returncode == 0 and marker in readable.stdout and "degraded" not in readable.stdout


def test_get_all_follows_cursors_and_says_when_truncated(cluster):
    cwd = cluster.workspace("a")
    for i in range(3):
        cluster.json("add", f"paging note {i}: the build runs on kestrel", "--type", "session", cwd=cwd)
    everything = cluster.json("get_all", "--page-size", "2", cwd=cwd)
    assert everything["truncated"] is False and everything["next_cursor"] is None
    assert everything["pages"] >= 2, "small pages must be followed, not just the first one"
    texts = [r["memory"] for r in everything["results"]]
    assert {f"paging note {i}: the build runs on kestrel" for i in range(3)} <= set(texts)
    assert len({r["id"] for r in everything["results"]}) == len(texts), "no memory twice across pages"
    session = next(r for r in everything["results"] if r["memory"].startswith("paging note"))
    assert session["expiration_date"], "a session memory expires"

    first_two = cluster.json("get_all", "--limit", "2", "--page-size", "1", cwd=cwd)
    assert len(first_two["results"]) == 2 and first_two["truncated"] is True and first_two["next_cursor"]
    readable = cluster.client("get_all", "--limit", "2", cwd=cwd)
    assert readable.returncode == 0 and "truncated" in readable.stdout


def test_get_and_delete_by_id(cluster):
    cwd = cluster.workspace("a")
    new_id = cluster.json("add", "temporary: delete me", cwd=cwd)["results"][0]["id"]
    assert cluster.json("get", new_id, cwd=cwd)["memory"] == "temporary: delete me"
    assert cluster.json("delete", new_id, cwd=cwd) == {"deleted": new_id}
    gone = cluster.client("get", new_id, cwd=cwd)
    assert gone.returncode == 1 and f"no memory {new_id}" in gone.stderr and "(HTTP 404)" in gone.stderr


def test_status_needs_no_token(cluster, tmp_path):
    answer = cluster.json("status", cwd=tmp_path)
    assert answer["daemon"]["running"] is True and answer["conversation"]["reachable"] is True
    readable = cluster.client("status", cwd=tmp_path)
    assert readable.returncode == 0 and "conversation  embedded" in readable.stdout and "reachable" in readable.stdout


def test_a_wrong_token_is_exit_1_with_a_clear_message(cluster):
    proc = cluster.client("search", "Qdrant", cwd=cluster.workspace("a"), env={"MEMSTRATA_TOKEN": "not-a-token"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("mem0_client: a valid token is required") and "(HTTP 401)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_refusal_before_the_body_is_read_is_the_answer_both_clients_give(cluster):
    """The daemon answers 401 from the headers and closes without reading the body: a client still
    sending it (4 MB here, far past a socket buffer) must report that 401, not a broken pipe."""
    body = {"agent": "a", "q": "x", "padding": "x" * 4_000_000}
    skill = mem0_client.Mem0Client("a", "not-a-token", cluster.daemon.socket, 30)
    with pytest.raises(mem0_client.RequestError) as skill_refused:
        skill.request("POST", "/v1/search", body=body)
    assert skill_refused.value.status == 401
    front = DaemonClient(cluster.daemon.socket, token="not-a-token")
    with pytest.raises(DaemonRequestError) as front_refused:
        front._request("POST", "/v1/search", json=body)
    assert front_refused.value.status == 401 and "valid token" in str(front_refused.value)


def test_no_token_outside_a_workspace(cluster, tmp_path):
    proc = cluster.client("search", "Qdrant", cwd=tmp_path)
    assert proc.returncode == 1 and "no token" in proc.stderr


def test_agent_b_does_not_see_a_private_memory(cluster):
    a_id = cluster.json("add", "a's secret plan: migrate to 青岛 region", cwd=cluster.workspace("a"))["results"][0][
        "id"
    ]
    b_cwd = cluster.workspace("b")
    found = cluster.json("search", "migrate 青岛 region plan", "--limit", "50", cwd=b_cwd)
    assert all(r.get("agent_id") != "a" for r in found["results"]) and found["degraded"] is False
    listed = cluster.json("get_all", cwd=b_cwd)
    assert all(r["agent_id"] == "b" or r["visibility"] != "private" for r in listed["results"])
    fetch = cluster.client("get", a_id, cwd=b_cwd)
    assert fetch.returncode == 1 and "no memory" in fetch.stderr, "another's private memory is not admitted to exist"


def test_b_cannot_act_as_a(cluster):
    proc = cluster.client("add", "written as someone else", "--agent", "a", cwd=cluster.workspace("b"))
    assert proc.returncode == 1 and "belongs to agent 'b', not 'a'" in proc.stderr


def test_secrets_are_refused(cluster):
    proc = cluster.client("add", f"the key is {FAKE_API_KEY}", cwd=cluster.workspace("a"))
    assert proc.returncode == 1 and "never_store" in proc.stderr and "(HTTP 422)" in proc.stderr
    assert FAKE_API_KEY not in proc.stderr


def test_importable_as_a_module(cluster):
    client = mem0_client.Mem0Client.discover(workspace=str(cluster.workspace("b")), config=str(cluster.config))
    assert client.agent == "b" and client.socket_path == cluster.daemon.socket
    added = client.add("b remembers: the release train leaves on Fridays", memory_type="procedure")
    assert added["memory_type"] == "procedure"
    found = client.search("release train Fridays")
    assert any(r["id"] == added["results"][0]["id"] for r in found["results"])
    with pytest.raises(mem0_client.RequestError) as denied:
        client.add("x", visibility="public")
    assert denied.value.status == 403


# ---------------------------------------------------------------- conversation store down


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_store_down_search_is_degraded_and_writes_are_queued(tmp_path):
    """A remote store nobody serves: search answers from a's local index, marked; a write is queued."""
    down = {
        "backend": "remote",
        "qdrant": {"url": f"http://127.0.0.1:{closed_port()}", "timeout_s": 1},
        "probe_interval_s": 0.5,
    }
    c = start_cluster(tmp_path, conversation=down)
    try:
        wait_for(lambda: c.daemon.status()["conversation"]["breaker"]["failures"], what="a failed probe")
        notes = c.workspace("a") / "memory" / f"{time.strftime('%Y-%m-%d')}.md"
        notes.write_text("# today\n\n- the staging box is called kestrel\n", encoding="utf-8")
        cwd = c.workspace("a")
        answer = wait_for(
            lambda: (r := c.json("search", "kestrel", cwd=cwd))["results"] and r,
            timeout=30,
            what="the local index answers for a",
        )
        assert answer["degraded"] is True and answer["layer"] == "local"
        assert "unreachable" in answer["reason"]
        assert answer["results"][0]["source"] == "local" and answer["results"][0]["path"].startswith("memory/")
        readable = c.client("search", "kestrel", cwd=cwd)
        assert readable.returncode == 0 and readable.stdout.startswith("(degraded:") and "kestrel" in readable.stdout

        strict = c.client("search", "kestrel", "--no-fallback", cwd=cwd)
        assert strict.returncode == 1 and "(HTTP 503)" in strict.stderr

        queued = c.json("add", "remember me later", cwd=cwd)
        assert queued["queued"] is True and queued["reason"]
        assert c.daemon.status()["conversation"]["queue"]["depth"] == 1
        readable_add = c.client("add", "and me", cwd=cwd)
        assert readable_add.returncode == 0 and readable_add.stdout.startswith("queued ")
    finally:
        c.daemon.stop()
