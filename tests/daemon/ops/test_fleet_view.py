"""The fleet at a glance on the hub (daemon/ops/fleet_view.py, ``memstrata status --fleet``, ``/metrics``).

A fleet on plain paths, made as the hub makes it (daemon/ops/fleet_remote.py: the top, ``hosts/H.git`` per
authorized host), each host's report pushed as a host pushes it (layers/daily/git/host_report.py).  The
hub's command runs as a real subprocess, through a real hub daemon or (the daemon down) reading the
repositories itself; the reports a hostile host could push are generated and each read without a crash.
"""

from __future__ import annotations

import getpass
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from daemon.front.daemon_client import _UnixConnection
from daemon.front.fleet_status import render
from daemon.ops import fleet_remote, fleet_view
from layers.daily.git import host_report
from layers.daily.git.remote import Remote
from tests.helpers import LEAN, MEMSTRATA, init_root, run_cli, wait_for

USER = getpass.getuser()
SPOKES = ("spoke-1", "spoke-2", "spoke-3")  # spoke-3: authorized, never heard from
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what a terminal obeys


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=cwd).stdout


class Fleet:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.top = tmp / "srv" / "fleet.git"
        keys = tmp / "home" / ".ssh" / "authorized_keys"
        gate = tmp / "lib" / "fleet-gate"
        fleet_remote.init_remote(self.top, user=USER, gate=gate, authorized_keys=keys)
        keys.parent.mkdir(parents=True, exist_ok=True)
        for host in SPOKES:
            key = tmp / f"key-{host}"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
            fleet_remote.authorize(host, key.with_suffix(".pub"), user=USER, gate=gate, authorized_keys=keys)

    def repository(self, host: str) -> Path:
        return self.top if host == "hub" else self.top / "hosts" / f"{host}.git"

    def report(self, host: str, content: dict | bytes) -> str:
        """``content`` pushed as ``host``'s report (a dict: as JSON), the way a host pushes it."""
        raw = content if isinstance(content, bytes) else json.dumps(content).encode()
        mirror = self.tmp / "mirrors" / host
        update = host_report.push_report(Remote(str(self.repository(host))), mirror, host, raw)
        assert update.status != "refused", update
        return update.sha

    def push_agent(self, host: str, agent: str) -> str:
        """A commit of ``agent``'s pushed to ``refs/memstrata/<host>/<agent>/line/0``; its sha."""
        ws = self.tmp / "ws" / f"{host}-{agent}"
        if not ws.exists():
            _git("init", "-q", str(ws))
        (ws / "note.md").write_text(f"{host} {agent} {time.time()}\n")
        _git("-C", str(ws), "add", "-A")
        _git("-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "note")
        ref = f"refs/memstrata/{host}/{agent}/line/0"
        _git("-C", str(ws), "push", "-q", str(self.repository(host)), f"HEAD:{ref}")
        return _git("-C", str(ws), "rev-parse", "HEAD").strip()

    def age(self, host: str, seconds: float) -> None:
        """The hub received ``host``'s last report ``seconds`` ago: its reflog says so."""
        log = self.repository(host) / "logs" / "refs" / "memstrata" / host / "status"
        old = str(int(time.time() - seconds))
        log.write_text(re.sub(r"> \d+ ", f"> {old} ", log.read_text()))


def _doc(host: str, agents: dict | None = None, clock: float | None = None) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() if clock is None else clock))
    return {"host": host, "version": "0.1.0", "time": stamp, "agents": agents or {}}


def _agent(host: str, agent: str, behind: int, last: str | None, refused: int = 0) -> dict:
    ref = f"refs/memstrata/{host}/{agent}/line/0"
    return {"last_pushed": last, "head": None, "behind_commits": behind, "behind_lost": 0, "remote_ref": ref,
            "refused": refused}  # fmt: skip


@pytest.fixture
def fleet(tmp_path):
    """hub (its report in the top, agent-a), spoke-1 (agent-c, 2 behind; agent-e), spoke-2 (silent an hour, its
    clock 3 hours behind), spoke-3 (never heard from)."""
    f = Fleet(tmp_path)
    f.agent_a = f.push_agent("hub", "agent-a")
    f.hub_report = f.report("hub", _doc("hub", {"agent-a": _agent("hub", "agent-a", 0, f.agent_a)}))
    f.agent_c = f.push_agent("spoke-1", "agent-c")
    agents = {
        "agent-c": _agent("spoke-1", "agent-c", 2, f.agent_c),
        "agent-e": _agent("spoke-1", "agent-e", 0, None, 1),
    }
    f.report("spoke-1", _doc("spoke-1", agents))
    f.report("spoke-2", _doc("spoke-2", clock=time.time() - 3 * 3600))
    f.age("spoke-2", 3600)
    return f


def _hub_config(tmp_path: Path, remote: str | None, **fleet: object) -> Path:
    git = {**LEAN["git"], **({"remote": remote} if remote else {}), "push_retry_max_s": 2, "status_interval_s": 10}
    return init_root(tmp_path / "hub", **{**LEAN, "git": git, "fleet": {"host": "hub", **fleet}})


def _hosts(document: dict) -> dict[str, dict]:
    return {h["host"]: h for h in document["hosts"]}


# ---------------------------------------------------------------- what status --fleet says


def test_status_fleet_lists_each_host_its_agents_backlogs_and_who_is_silent(fleet, tmp_path):
    """The daemon down: the command reads the repositories itself (the same document)."""
    config = _hub_config(tmp_path, str(fleet.top))
    document = json.loads(run_cli("status", "--fleet", "--json", config=config).stdout)
    assert document["top"] == str(fleet.top) and document["hub"] == "hub" and document["silent_after_s"] == 900
    assert document["counts"] == {"hosts": 4, "silent": 1, "never_heard": 1, "unreadable": 0}
    hosts = _hosts(document)
    assert list(hosts) == ["hub", "spoke-1", "spoke-2", "spoke-3"]
    hub, one, two, three = hosts.values()
    assert hub["hub"] is True and hub["state"] == "ok" and [a["id"] for a in hub["agents"]] == ["agent-a"]
    assert one["state"] == "ok" and one["silent"] is False and one["version"] == "0.1.0" and one["error"] is None
    status_ref = _git("--git-dir", str(fleet.repository("spoke-1")), "rev-parse", "refs/memstrata/spoke-1/status")
    assert one["heard_ago_s"] < 600 and one["report"] == status_ref.strip()
    c, e = one["agents"]
    assert (c["id"], c["behind_commits"], c["last_pushed"], c["on_hub"]) == ("agent-c", 2, fleet.agent_c, fleet.agent_c)
    assert c["pushed_at"] and c["refused"] == 0 and c["remote_ref"] == "refs/memstrata/spoke-1/agent-c/line/0"
    assert (e["id"], e["refused"], e["last_pushed"], e["pushed_at"], e["on_hub"]) == ("agent-e", 1, None, None, None)
    # the hub's clock says when it was heard from; the host's own clock (3 hours behind) is shown beside it
    assert two["state"] == "silent" and two["silent"] is True and 3500 < two["heard_ago_s"] < 4000
    assert two["clock_skew_s"] is not None and abs(two["clock_skew_s"] + 2 * 3600) < 600
    assert three["state"] == "never_heard" and three["heard_at"] is None and three["agents"] == []
    assert set(one) == {
        "host", "hub", "state", "silent", "heard_at", "heard_ago_s", "reported_at", "clock_skew_s", "version",
        "report", "error", "agents", "agents_left_out",
    }  # fmt: skip

    text = run_cli("status", "--fleet", config=config).stdout
    assert text.startswith(f"fleet at {fleet.top}: 4 host(s), 1 SILENT, 1 never heard from (silent after 15m)")
    assert re.search(r"spoke-2 +SILENT: last heard 1h ago \(its own clock said [34]h ago\)", text), text
    assert re.search(r"spoke-3 +never heard from", text), text
    assert re.search(r"spoke-1 +heard \d+s ago, memstrata 0.1.0", text), text
    assert re.search(rf"agent-c +behind 2, last pushed {fleet.agent_c[:12]} received \d+s ago", text), text
    assert re.search(r"agent-e +behind 0, REFUSED 1 ref\(s\)", text), text


def test_status_fleet_watch_shows_it_again_with_what_arrived_until_interrupted(fleet, tmp_path):
    config = _hub_config(tmp_path, str(fleet.top))
    cmd = [*MEMSTRATA, "--config", str(config), "status", "--fleet", "--watch", "--interval", "0.2", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert _hosts(first)["spoke-3"]["state"] == "never_heard"
        fleet.report("spoke-3", _doc("spoke-3"))  # spoke-3 is heard from while the command watches
        later, deadline = first, time.monotonic() + 60
        while _hosts(later)["spoke-3"]["state"] == "never_heard" and time.monotonic() < deadline:
            later = json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert _hosts(later)["spoke-3"]["state"] == "ok" and later["counts"]["never_heard"] == 0
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_silent_after_is_the_configured_time_and_never_under_twice_the_report_interval(fleet, tmp_path):
    config = _hub_config(tmp_path, str(fleet.top), silent_after_s=4000)
    document = json.loads(run_cli("status", "--fleet", "--json", config=config).stdout)
    assert document["silent_after_s"] == 4000 and _hosts(document)["spoke-2"]["state"] == "ok"
    config.write_text(config.read_text().replace("silent_after_s: 4000", "silent_after_s: 15"))
    refused = run_cli("status", "--fleet", config=config, check=False)
    assert refused.returncode == 1 and "at least twice git.status_interval_s" in refused.stderr


@pytest.mark.parametrize(
    ("remote", "why"),
    [
        (None, "no git.remote"),
        ("ssh://git@hub/srv/fleet.git", "git.remote is a URL"),
        ("/nowhere/fleet.git", "no hosts/"),
    ],
)
def test_status_fleet_off_the_hub_says_where_it_runs(tmp_path, remote, why):
    if fleet_remote.GATE.exists():
        pytest.skip(f"this machine is a hub ({fleet_remote.GATE} names its repository)")
    config = _hub_config(tmp_path, remote)
    proc = run_cli("status", "--fleet", "--json", config=config, check=False)
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 1 and error["code"] == "not_the_hub"
    assert error["message"].startswith("status --fleet runs on the hub") and why in error["message"]
    assert f"no gate at {fleet_remote.GATE}" in error["message"]
    if remote is None:
        assert run_cli("status", "--json", config=config, check=False).returncode == 3, "the rest of status as it was"


def test_a_hub_whose_daemon_pushes_through_ssh_finds_the_repository_by_its_gate(fleet):
    """The hub's own daemon may push like a spoke (an ssh URL, its own key, hosts/hub.git): the gate
    that init-remote installed names the top repository."""
    gate = fleet.tmp / "lib" / "fleet-gate"
    assert fleet_view.top_of("ssh://git@hub/srv/fleet.git", gate) == fleet.top
    assert fleet_view.top_of(str(fleet.top), fleet.tmp / "no-gate") == fleet.top
    with pytest.raises(fleet_view.NotTheHub, match=r"here: git\.remote is a URL; no gate at"):
        fleet_view.top_of("ssh://git@hub/srv/fleet.git", fleet.tmp / "no-gate")


# ---------------------------------------------------------------- hostile reports

HOSTILE: dict[str, bytes] = {
    "not JSON": b'{"host": "spoke-1", ',
    "binary": bytes(range(256)) * 4,
    "a list": b"[1, 2, 3]",
    "nested deep": b"[" * 100_000 + b"]" * 100_000,
    "NaN": b'{"host": "spoke-1", "agents": {"a": {"behind_commits": NaN}}}',
    "another host's name": json.dumps(_doc("spoke-2")).encode(),
    "agents a list": b'{"host": "spoke-1", "agents": [1]}',
    "over the cap": json.dumps({**_doc("spoke-1"), "pad": "x" * (fleet_view.MAX_REPORT_BYTES + 1)}).encode(),
}
ESC = "\x1b]0;PWNED\x07\x1b[2J\u202egpj.md\x9b31m"
# parsed, with every value that is not what a host writes left out or escaped when shown
TAMPERED = {
    "host": "spoke-1",
    "version": ESC * 20,
    "time": "not a time" + ESC,
    "agents": {
        "agent-c": {"behind_commits": "3", "behind_lost": -1, "last_pushed": "../../etc", "refused": True,
                    "remote_ref": "refs/memstrata/spoke-2/agent-c/line/0"},
        "../evil": {"behind_commits": 1},
        f"a{ESC}": {"behind_commits": 1},
        "agent-d": {"behind_commits": 2**70, "remote_ref": "refs/memstrata/spoke-1/agent-d/line/0/../../../status"},
        "agent-f": "not an object",
        **{f"x{n}": {"behind_commits": n} for n in range(fleet_view.MAX_AGENTS + 5)},
    },
}  # fmt: skip


@pytest.mark.parametrize("name", list(HOSTILE))
def test_an_unreadable_report_lists_the_host_as_such(fleet, tmp_path, name):
    fleet.report("spoke-1", HOSTILE[name])
    config = _hub_config(tmp_path, str(fleet.top))
    one = _hosts(json.loads(run_cli("status", "--fleet", "--json", config=config).stdout))["spoke-1"]
    assert one["error"].startswith("report unreadable: ") and one["agents"] == [] and one["state"] == "ok"
    assert one["heard_at"] and one["version"] is None
    assert "report unreadable" in run_cli("status", "--fleet", config=config).stdout


def test_a_tampered_report_keeps_only_what_has_its_type_and_shows_no_raw_control(fleet, tmp_path):
    fleet.report("spoke-1", json.dumps(TAMPERED).encode())
    config = _hub_config(tmp_path, str(fleet.top))
    document = json.loads(run_cli("status", "--fleet", "--json", config=config).stdout)
    one = _hosts(document)["spoke-1"]
    assert one["error"] is None and len(one["version"]) == fleet_view.MAX_VERSION_CHARS and one["reported_at"] is None
    agents = {a["id"]: a for a in one["agents"]}
    assert len(agents) == fleet_view.MAX_AGENTS and one["agents_left_out"] == len(TAMPERED["agents"]) - len(agents)
    assert "../evil" not in agents and not any("\x1b" in a for a in agents) and "agent-f" not in agents
    c, d = agents["agent-c"], agents["agent-d"]
    assert (c["behind_commits"], c["behind_lost"], c["last_pushed"], c["refused"], c["remote_ref"]) == (None,) * 5
    assert (d["behind_commits"], d["remote_ref"], d["pushed_at"]) == (None, None, None)
    text = run_cli("status", "--fleet", config=config).stdout
    assert not RAW_CONTROL.search(text) and "\\x1b]0;PWNED\\x07" in text and "\\u202e" in text
    assert not RAW_CONTROL.search(run_cli("status", "--fleet", "--json", config=config).stdout)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
AGENT = st.fixed_dictionaries(
    {},
    optional={
        k: JSON | st.sampled_from(["refs/memstrata/spoke-1/a/line/0", "0" * 40, "-1", ESC])
        for k in ("behind_commits", "behind_lost", "last_pushed", "remote_ref", "refused")
    },
)
REPORT = st.fixed_dictionaries(
    {"host": st.sampled_from(["spoke-1", "spoke-1", "spoke-2", ESC]) | JSON},
    optional={
        "version": JSON | st.just(ESC),
        "time": JSON | st.sampled_from(["2026-12-06T22:00:00+00:00", "2026-12-06T22:00:00", "9999-99-99"]),
        "agents": JSON | st.dictionaries(st.sampled_from(["a", "agent-c", "A", "", ESC]) | st.text(max_size=8), AGENT),
    },
)


@settings(max_examples=300, deadline=None)
@given(report=REPORT | JSON)
def test_any_report_is_read_or_said_unreadable_and_renders_without_raw_controls(report):
    raw = json.dumps(report).encode()
    try:
        parsed = fleet_view.parse_report(raw, "spoke-1")
    except fleet_view.ReportUnreadable as exc:
        assert str(exc)
        return
    for agent in parsed.agents:
        assert re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", agent.id)
        for count in (agent.behind_commits, agent.behind_lost, agent.refused):
            assert count is None or (type(count) is int and count >= 0)
        assert agent.last_pushed is None or re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", agent.last_pushed)
        assert agent.remote_ref in (None, f"refs/memstrata/spoke-1/{agent.id}/line/0")
    reading = fleet_view.Reading(
        Path("/srv/fleet.git"),
        "hub",
        (fleet_view.HostReading("spoke-1", Path("/srv/h/spoke-1.git"), "0" * 40, time.time(), parsed, None),),
        0,
        time.time(),
    )
    assert not RAW_CONTROL.search(render(fleet_view.document(reading, 900)))


# ---------------------------------------------------------------- through the hub's daemon


def _series(socket: Path, token: str | None) -> dict:
    conn = _UnixConnection(str(socket), timeout=30)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
    text = conn.getresponse().read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
def test_the_hub_daemon_answers_status_fleet_and_metrics_with_a_host_label(fleet, tmp_path, daemons):
    config = _hub_config(tmp_path, str(fleet.top))
    d = daemons(config)

    def hub_reported() -> dict:  # the hub's daemon pushes its own report into the top at start
        document = json.loads(run_cli("status", "--fleet", "--json", config=config).stdout)
        hub = _hosts(document)["hub"]
        return document if hub["report"] != fleet.hub_report else {}

    document = wait_for(hub_reported, timeout=60, what="the hub daemon's own report")
    assert "daemon" not in document, "answered by the daemon, not read by the command"
    assert _hosts(document)["spoke-1"]["agents"][0]["behind_commits"] == 2

    labels = {"host": "spoke-1", "agent": "agent-c"}

    def fleet_series() -> dict:  # the first scrape may come before the first reading: it never waits for one
        series = _series(d.socket, d.admin_token())
        return series if ("memstrata_fleet_hosts", ()) in series else {}

    admin = wait_for(fleet_series, timeout=30, what="the fleet's series")
    assert admin[("memstrata_fleet_hosts", ())] == 4
    assert admin[("memstrata_fleet_agent_behind_commits", tuple(sorted(labels.items())))] == 2
    assert admin[("memstrata_fleet_agent_refused_refs", (("agent", "agent-e"), ("host", "spoke-1")))] == 1
    assert admin[("memstrata_fleet_agent_last_push_timestamp_seconds", tuple(sorted(labels.items())))] > 0
    assert admin[("memstrata_fleet_host_silent", (("host", "spoke-2"),))] == 1
    assert admin[("memstrata_fleet_host_silent", (("host", "spoke-1"),))] == 0
    assert admin[("memstrata_fleet_host_never_heard", (("host", "spoke-3"),))] == 1
    assert 3500 < admin[("memstrata_fleet_host_last_heard_seconds", (("host", "spoke-2"),))] < 4000
    assert admin[("memstrata_fleet_host_info", (("host", "spoke-1"), ("version", "0.1.0")))] == 1
    assert not any(name.startswith("memstrata_fleet") for name, _ in _series(d.socket, None)), "the admin's only"

    # a host's later report is seen once the few seconds of the last reading are over
    fleet.report("spoke-3", _doc("spoke-3"))
    wait_for(
        lambda: (
            _hosts(json.loads(run_cli("status", "--fleet", "--json", config=config).stdout))["spoke-3"]["state"] == "ok"
        ),
        timeout=30,
        what="spoke-3 heard from",
    )


@pytest.mark.slow
def test_a_daemon_off_the_hub_says_so_and_serves_no_fleet_series(tmp_path, daemons):
    if fleet_remote.GATE.exists():
        pytest.skip(f"this machine is a hub ({fleet_remote.GATE} names its repository)")
    config = _hub_config(tmp_path, None)
    d = daemons(config)
    proc = run_cli("status", "--fleet", config=config, check=False)
    assert proc.returncode == 1 and "status --fleet runs on the hub" in proc.stderr and "no git.remote" in proc.stderr
    assert "no gate at" in proc.stderr
    assert not any(name.startswith("memstrata_fleet") for name, _ in _series(d.socket, d.admin_token()))
