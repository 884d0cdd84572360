"""L4 through the hub on the booted fleet (issue 48), set up as the README's "Several hosts" says, for
tests/system/test_fleet_l4.py and bench/bench_fleet_l4.py.

The hub: memstrata installed (agents ``main`` and ``agent-a``, ``agent-a`` in project ``infra``, whose
members also name ``spoke-1/ops``: a spoke's agent as the hub knows it), ``fleet.listen`` on its fleet
address, then ``memstrata fleet add-host spoke-N --agent main --agent ops --key-file /root/spoke-N.key``
for each spoke.  Each spoke: installed with agents ``main`` and ``ops``, the key copied to
:data:`HUB_KEY` (0600), ``conversation.backend: hub`` pointing at the hub.  Every host's daemon runs as
memstrata.service.  Calls are made inside a host by tests/system/l4_driver.py, as the host's agents (their
own tokens, through their own daemon's socket), or as a thief on the hub's peer port.
"""

from __future__ import annotations

import json
import re
import time

import yaml

from tests.helpers import REPO_ROOT
from tests.system import operator
from tests.system.fleet import HUB, SPOKES, Fleet, address

PORT = 7000
LISTEN = f"{address(HUB)}:{PORT}"
URL = f"http://{LISTEN}"
HUB_KEY = "/etc/memstrata/hub-key"  # on a spoke: its key, as add-host wrote it on the hub
SPOKE_AGENTS = ("main", "ops")
HUB_AGENTS = ("main", "agent-a")
PROJECT = "infra"
PROJECT_MEMBERS = ("agent-a", "spoke-1/ops")  # spoke-N/main may also write public memories
REGISTRY = f"{operator.WORKSPACE}/skills/mem0-integration/project_registry.yaml"
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
DRIVER = str(REPO_ROOT / "tests" / "system" / "l4_driver.py")
HUB_TIMEOUT_S = 15  # conversation.hub.timeout_s on the spokes: one request to the hub (a loaded machine)
PROBE_S = 1  # conversation.probe_interval_s on the spokes: the hub's return is seen within it


def key_file_on_hub(role: str) -> str:
    return f"/root/{role}.key"


def setup(f: Fleet, spokes: tuple[str, ...] = SPOKES) -> None:
    """Every host installed, configured, then started once (memstrata.service); the hub's peer API on, each
    spoke enrolled and using it; the hub's model loaded."""

    def install(role: str) -> None:  # tests/system/fleet.py's Fleet.install without its start
        c = f.container(role)
        operator.install(c)
        for agent in SPOKE_AGENTS[1:] if role != HUB else ():
            operator.memstrata(c, "agent", "add", agent)

    f.each(install, (HUB, *spokes))
    configure_hub(f)
    for role in spokes:
        enrol(f, role)
    f.each(lambda role: configure_spoke(f, role, start=False), spokes)
    f.each(lambda role: operator.systemctl(f.container(role), "start", timeout=240), (HUB, *spokes))
    warm = [
        {"agent": "main", "op": op, "args": ["the hub's first memory: its model loaded"], "kwargs": kwargs}
        for op, kwargs in (("add", {"visibility": "private"}), ("memory_search", {}))
    ]
    answers = ops(f, HUB, warm)  # the hub's embedding model loaded before any spoke's request times out on it
    assert all(a["status"] == 200 for a in answers), answers


def configure_hub(f: Fleet) -> None:
    """``agent-a`` in project infra (with spoke-1/ops), each spoke's main allowed public memories,
    ``fleet.listen``; read when the daemon (re)starts."""
    c = f.container(HUB)
    operator.memstrata(c, "agent", "add", "agent-a", "--project", PROJECT)
    registry = yaml.safe_load(c.read(REGISTRY))
    members = registry["projects"][PROJECT]["members"]
    members += [m for m in PROJECT_MEMBERS if m not in members]
    for spoke in SPOKES:  # each spoke's main may write public memories, as the hub's main may
        registry.setdefault("agents", {}).setdefault(f"{spoke}/main", {})["can_write_public"] = True
    c.write(REGISTRY, yaml.safe_dump(registry))
    text = c.read(operator.CONFIG)
    c.write(operator.CONFIG, text + f"fleet:\n  listen: {LISTEN}\n", mode=_mode(f, HUB))


def enrol(f: Fleet, role: str, *extra: str, agents: tuple[str, ...] = SPOKE_AGENTS, copy: bool = True) -> str:
    """``memstrata fleet add-host ROLE --agent … --key-file /root/ROLE.key [extra]`` on the hub, the key file
    copied into the spoke (:data:`HUB_KEY`, 0600) unless ``copy`` is false (:func:`copy_key`); the key."""
    hub = f.container(HUB)
    args = [a for agent in agents for a in ("--agent", agent)]
    operator.memstrata(hub, "fleet", "add-host", role, *args, "--key-file", key_file_on_hub(role), *extra)
    if copy:
        copy_key(f, role)
    return hub.read(key_file_on_hub(role)).strip()


def copy_key(f: Fleet, role: str) -> None:
    """The key add-host wrote on the hub, copied into the spoke as the operator does (root's, 0600)."""
    f.container(role).write(HUB_KEY, f.container(HUB).read(key_file_on_hub(role)), mode=0o600)


def configure_spoke(f: Fleet, role: str, start: bool = True) -> None:
    """``conversation.backend: hub`` with the hub's URL and the key file; the daemon restarted (``start``)."""
    c = f.container(role)
    text = c.read(operator.CONFIG)
    hub = (
        f'  backend: hub\n  hub: {{url: "{URL}", key_file: {HUB_KEY}, timeout_s: {HUB_TIMEOUT_S}}}\n'
        f"  probe_interval_s: {PROBE_S}\n"
    )
    text, n = re.subn(r"^  backend: embedded\b.*\n", hub, text, count=1, flags=re.M)
    assert n == 1, "no conversation backend line in the installed configuration"
    c.write(operator.CONFIG, text, mode=_mode(f, role))
    if start:
        operator.systemctl(c, "restart", timeout=240)


def _mode(f: Fleet, role: str) -> int:
    return int(f.run(role, "stat", "-c", "%a", operator.CONFIG).stdout.strip(), 8)


# ------------------------------------------------------------ calls inside a host


def driver(f: Fleet, role: str, *args: str, input: str | None = None, timeout: float = 600):
    return f.run(role, PYTHON, DRIVER, *args, input=input, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    from tests.system.container import checkout_env

    return checkout_env()


def ops(f: Fleet, role: str, calls: list[dict], timeout: float = 600) -> list[dict]:
    """Each call ``{"agent", "op", "args", "kwargs"}`` made by that agent of ``role`` (through its daemon)."""
    out = driver(f, role, "ops", "--config", operator.CONFIG, input=json.dumps(calls), timeout=timeout).stdout
    return json.loads(out)


def call(f: Fleet, role: str, agent: str, op: str, *args: object, **kwargs: object) -> dict:
    return ops(f, role, [{"agent": agent, "op": op, "args": list(args), "kwargs": kwargs}])[0]


def added(f: Fleet, role: str, agent: str, text: str, wait_s: float = 180, **kwargs: object) -> str:
    """The id of ``text`` added by ``agent`` of ``role``: answered by the hub, or (a hub slow to answer on a
    loaded machine) queued, sent once the queue drains, and found in the agent's listing."""
    answer = call(f, role, agent, "add", text, **kwargs)
    assert answer["status"] == 200, answer
    if not answer["answer"].get("queued"):
        return answer["answer"]["results"][0]["id"]
    deadline = time.monotonic() + wait_s
    while depth(f, role) and time.monotonic() < deadline:
        time.sleep(0.5)
    (found,) = [x["id"] for x in listed(f, role, agent, text)]
    return found


def listed(f: Fleet, role: str, agent: str, marker: str) -> list[dict]:
    """What ``agent`` of ``role`` may read holding ``marker``: the hub's listing, every page."""
    out = driver(f, role, "list", "--config", operator.CONFIG, "--agent", agent, "--marker", marker).stdout
    return json.loads(out)


def stream(
    f: Fleet,
    role: str,
    agent: str,
    marker: str,
    count: int,
    out: str,
    interval: float = 0.0,
    stop_file: str | None = None,
    timeout: float = 1800,
) -> list[dict]:
    """``count`` adds by ``agent`` of ``role`` one after another; every answer as the driver recorded it."""
    args = ["stream", "--config", operator.CONFIG, "--agent", agent, "--marker", marker, "--count", str(count)]
    args += ["--interval", str(interval), "--out", out] + (["--stop-file", stop_file] if stop_file else [])
    driver(f, role, *args, timeout=timeout)
    return answers(f, role, out)


def answers(f: Fleet, role: str, out: str) -> list[dict]:
    text = f.run(role, "cat", out, check=False).stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def peer(f: Fleet, role: str, cases: list[dict], key_file: str = HUB_KEY, timeout: float = 900) -> list[dict]:
    """Raw requests from ``role`` to the hub's peer port with the key in ``key_file`` (a thief's view)."""
    out = driver(f, role, "peer", "--url", URL, "--key-file", key_file, input=json.dumps(cases), timeout=timeout)
    return json.loads(out.stdout)


def conversation(f: Fleet, role: str) -> dict:
    return operator.status(f.container(role))["conversation"]


def depth(f: Fleet, role: str) -> int:
    return int(conversation(f, role)["queue"]["depth"])


def settled(f: Fleet, role: str) -> bool:
    """Nothing left in ``role``'s queue and its store (the hub's own, a spoke's hub) answering.  After a power
    cut the hub answers while its store opens: it takes adds into its own queue, its listings are 503."""
    section = conversation(f, role)
    return bool(section["reachable"]) and not section["queue"]["depth"]


# ------------------------------------------------------------ the replica (issue 48 item 3)


def hub_set(f: Fleet, role: str, marker: str = "") -> dict:
    """What the hub would give ``role``'s replica (its snapshot with ``role``'s key): ``{"seq", "epoch",
    "memories": {id: {"payload", "readers"}}}``, payloads holding ``marker`` only."""
    args = ["hubset", "--url", URL, "--key-file", HUB_KEY, "--marker", marker]
    return json.loads(driver(f, role, *args).stdout)


def replica_set(f: Fleet, role: str, marker: str = "") -> dict:
    """The same read from ``role``'s replica (a copy of its current generation) and its meta file."""
    return json.loads(driver(f, role, "replica", "--config", operator.CONFIG, "--marker", marker).stdout)


def replica(f: Fleet, role: str) -> dict:
    """``conversation.replica`` in ``role``'s status."""
    return conversation(f, role)["replica"]


def hub_seq(f: Fleet) -> int:
    """The hub's change feed's settled seq (its status)."""
    return int(conversation(f, HUB)["feed"]["seq"])


def feed_times(f: Fleet) -> list[tuple[int, float]]:
    """Every row of the hub's change feed, ``(seq, wall time recorded)``: the hub's seq at any past moment."""
    rows = json.loads(driver(f, HUB, "feedtimes", "--config", operator.CONFIG, timeout=300).stdout)
    return [(int(seq), float(at)) for seq, at in rows]
