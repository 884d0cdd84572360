"""L2 to the hub on the booted fleet (issue 47 items 2 to 5): each spoke's memstrata.service pushes its agents'
history over ssh with the spoke's own key, a cut spoke's notes arrive once its link is back, a spoke that
loses power loses no commit it made, a lost spoke's agent is restored under its name, the hub's shared core
reaches every spoke's agents, and the hub's ``memstrata status --fleet`` shows every host, a cut one SILENT
until it is heard again.

One fleet for the module (tests/system/fleet.py), the tests in file order.  The hub serves the bare repository
over ssh; its own memstrata joins for the last two tests (fleet.role hub, git.remote the top's path).  Every
wait polls with a generous deadline.
"""

from __future__ import annotations

import json

import pytest

from tests.system import operator
from tests.system.fleet import AGENTS, HUB, KEY, REMOTE, REMOTE_PATH, SPOKES
from tests.system.operator import poll

pytestmark = pytest.mark.slow
AGENT = {role: agents[0] for role, agents in AGENTS.items()}
SHARED_POLL_S = 5  # the spokes ask the hub for the shared core this often (fleet.shared_poll_s)
REPORT_S = 10  # git.status_interval_s of every host here (the shipped 300 s, shortened)
SILENT_S = 30  # fleet.silent_after_s on the hub (the shipped 15 minutes, shortened; at least twice REPORT_S)


@pytest.fixture(scope="module")
def synced(fleet):
    """Both spokes installed, git.remote set to the hub over ssh with the spoke's own key, a report every
    REPORT_S seconds while idle; the host's name is its hostname (no fleet.host: the default)."""

    def setup(role: str) -> None:
        fleet.install(role)
        c = fleet.container(role)
        lines = f"git:\\n  remote: {REMOTE}\\n  remote_key_file: {KEY}\\n  push_retry_max_s: 5"
        lines += f"\\n  status_interval_s: {REPORT_S}"
        c.run("sed", "-i", f"s|^git:$|{lines}|", operator.CONFIG)
        c.sh(f"printf 'fleet:\\n  shared_poll_s: {SHARED_POLL_S}\\n' >> {operator.CONFIG}")  # role: spoke, the default
        operator.systemctl(c, "restart", timeout=240)

    fleet.each(setup, SPOKES)
    return fleet


def _workspace(role: str, agent: str | None = None) -> str:
    return f"{operator.AGENTS}/{agent or AGENT[role]}-workspace"


def _repo(role: str) -> str:
    """The host's own repository on the hub, behind the one URL (daemon/ops/fleet_gate.py)."""
    return f"{REMOTE_PATH}/hosts/{role}.git"


def _hub_ref(f, ref: str) -> str | None:
    """``refs/memstrata/<host>/…`` in that host's repository on the hub."""
    run = f.run(HUB, "git", "--git-dir", _repo(ref.split("/")[2]), "rev-parse", "-q", "--verify", ref, check=False)
    return run.stdout.strip() or None


def _line0(role: str, agent: str | None = None) -> str:
    return f"refs/memstrata/{role}/{agent or AGENT[role]}/line/0"


def _note(f, role: str, name: str, text: str) -> str:
    """A note written in the spoke's agent workspace; the commit that holds it."""
    ws = _workspace(role)
    f.container(role).write(f"{ws}/memory/{name}", text)

    def committed() -> str:
        line = f.run(role, "git", "-C", ws, "log", "-1", "--format=%H %s").stdout.strip()
        return line.split()[0] if name in line else ""

    return poll(committed, 60, f"{name} committed")


def _sync(f, role: str) -> dict:
    return operator.status(f.container(role))["sync"]


def _agent_sync(f, role: str) -> dict:
    return next(a for a in _sync(f, role)["agents"] if a["id"] == AGENT[role])


def test_two_spokes_push_their_agents_history_under_their_own_names(synced):
    f = synced
    heads = {role: _note(f, role, "2026-12-01.md", f"# {role}\n\n- first note\n") for role in SPOKES}
    for role, head in heads.items():
        poll(lambda role=role, head=head: _hub_ref(f, _line0(role)) == head, 90, f"{role}'s note on the hub")
        report = poll(lambda role=role: _hub_ref(f, f"refs/memstrata/{role}/status"), 60, f"{role}'s report")
        shown = f.run(HUB, "git", "--git-dir", _repo(role), "show", f"{report}:status.json").stdout
        assert json.loads(shown)["host"] == role
    s = _sync(f, "spoke-1")
    assert s["host"] == "spoke-1" and s["reachable"] is True and s["remote"] == REMOTE


def test_a_cut_spokes_notes_arrive_after_its_link_is_back(synced):
    f = synced
    f.cut("spoke-1")
    try:
        head = _note(f, "spoke-1", "2026-12-02.md", "# cut\n\n- written while the hub was away\n")
        poll(
            lambda: _sync(f, "spoke-1")["reachable"] is False and _agent_sync(f, "spoke-1")["behind_commits"] >= 1,
            90,
            "status: unreachable, behind",
        )
        assert _hub_ref(f, _line0("spoke-1")) != head
    finally:
        f.restore("spoke-1")
    poll(lambda: _hub_ref(f, _line0("spoke-1")) == head, 90, "the backlog drained")
    poll(lambda: _agent_sync(f, "spoke-1")["behind_commits"] == 0, 60, "status: caught up")


def test_a_spoke_that_loses_power_loses_no_commit_it_made(synced):
    f = synced
    before = _hub_ref(f, _line0("spoke-2"))
    f.cut("spoke-2")  # the commit cannot leave before the power cut: the backlog must survive it
    try:
        head = _note(f, "spoke-2", "2026-12-03.md", "# power\n\n- committed just before the cut\n")
        f.kill("spoke-2")
        f.boot("spoke-2")  # its link still down, as it was
        assert _hub_ref(f, _line0("spoke-2")) != head
        poll(lambda: _agent_sync(f, "spoke-2")["behind_commits"] >= 1, 180, "status after the boot: behind")
    finally:
        f.restore("spoke-2")
    poll(lambda: _hub_ref(f, _line0("spoke-2")) == head, 120, "the commit on the hub once the link is back")
    ahead = f.run(HUB, "git", "--git-dir", _repo("spoke-2"), "merge-base", "--is-ancestor", before, head, check=False)
    assert ahead.returncode == 0, "a fast-forward of what the hub had: nothing rewritten, nothing forced"


def test_a_lost_spokes_agent_is_restored_on_the_host_that_takes_its_name(synced):
    """spoke-2 loses its agent's workspace and state; the host under its name (its key) rebuilds it from the
    hub.  spoke-1's key reads only spoke-1's refs (the gate), so it cannot take spoke-2's agent."""
    f = synced
    agent = AGENT["spoke-2"]
    pushed = _hub_ref(f, _line0("spoke-2"))
    count = f.run(HUB, "git", "--git-dir", _repo("spoke-2"), "rev-list", "--count", pushed).stdout.strip()
    f.run("spoke-2", "systemctl", "stop", "memstrata.service", timeout=120)
    f.sh("spoke-2", f"rm -rf {_workspace('spoke-2')} /var/lib/memstrata/history/{agent}.git")

    other = operator.memstrata(f.container("spoke-1"), "agent", "restore-from-remote", agent, "--host", "spoke-2",
                               "--json", check=False)  # fmt: skip
    assert other.returncode != 0 and json.loads(other.stdout)["error"]["code"] == "not_on_remote", other.stdout

    c = f.container("spoke-2")
    done = json.loads(operator.memstrata(c, "agent", "restore-from-remote", agent, "--json").stdout)
    assert done["commit"] == pushed and str(done["commits"]) == count
    ws = _workspace("spoke-2")
    assert f.run("spoke-2", "git", "-C", ws, "rev-parse", "HEAD").stdout.strip() == pushed
    assert "committed just before the cut" in c.read(f"{ws}/memory/2026-12-03.md")
    again = operator.memstrata(c, "agent", "restore-from-remote", agent, check=False)
    assert again.returncode != 0 and "exists here" in again.stderr
    operator.systemctl(c, "start", timeout=240)

    def found() -> bool:
        out = operator.memstrata(c, "search", "committed just before the cut", "--agent", agent, "--json").stdout
        return any(r["path"] == "memory/2026-12-03.md" for r in json.loads(out)["results"])

    poll(found, 120, "the restored agent searchable on spoke-2")
    assert _hub_ref(f, _line0("spoke-2")) == pushed, "the restored history is the one the hub has: nothing rewritten"


def _hub_installed(f):
    """memstrata on the hub as an operator sets it up there: git.remote the top's path, fleet.role hub, then
    `memstrata install` again so the unit may write that path (ReadWritePaths=, set-group-ID directories);
    a report every REPORT_S, a host silent after SILENT_S.  The daemon runs on with its first configuration
    until the caller restarts it."""
    f.install(HUB)  # memstrata install and the hub's agents
    c = f.container(HUB)
    lines = f"git:\\n  remote: {REMOTE_PATH}\\n  status_interval_s: {REPORT_S}"
    c.run("sed", "-i", f"s|^git:$|{lines}|", operator.CONFIG)
    c.sh(f"printf 'fleet:\\n  role: hub\\n  silent_after_s: {SILENT_S}\\n' >> {operator.CONFIG}")
    operator.install(c)
    assert REMOTE_PATH in c.read("/etc/systemd/system/memstrata.service")
    return c


def test_the_hubs_shared_core_reaches_both_spokes_agents(synced):
    """The hub's memstrata (installed now, as an operator would: git.remote the top's path, fleet.role hub,
    then `memstrata install` again so the unit may write that path) pushes shared/; the top's hook copies it
    into each host's repository; each spoke fetches it through the gate within its poll interval."""
    f = synced
    c = _hub_installed(f)
    text = "# cluster\n\nEvery agent answers the fleet's pager in turn.\n"
    c.write(f"{operator.WORKSPACE}/shared/CLUSTER.md", text)
    operator.systemctl(c, "restart", timeout=240)
    core = poll(
        lambda: f.run(HUB, "git", "--git-dir", REMOTE_PATH, "rev-parse", "-q", "--verify", "refs/memstrata/shared/core",
                      check=False).stdout.strip(),
        90, "the hub's shared core in the top",
    )  # fmt: skip
    for role in SPOKES:
        spoke = f.container(role)

        def seen(spoke=spoke, role=role) -> bool:
            bundle = operator.memstrata(spoke, "core", "--agent", AGENT[role]).stdout
            return "answers the fleet's pager" in bundle

        poll(seen, SHARED_POLL_S * 2 + 60, f"the shared core in {role}'s agent's bundle")
        shared = operator.status(spoke)["sync"]["shared_core"]
        assert shared["role"] == "spoke" and shared["commit"] == core and shared["reachable"] is True
        mode = f.run(role, "stat", "-c", "%a", f"{operator.WORKSPACE}/shared/CLUSTER.md").stdout.strip()
        assert mode == "444", "installed read-only"
    hub = operator.status(c)["sync"]["shared_core"]
    assert hub["role"] == "hub" and hub["commit"] == core and hub["last_push"]


@pytest.fixture(scope="module")
def hub_view(synced):
    """memstrata running on the hub (test_the_hubs_shared_core_reaches_both_spokes_agents starts it; alone,
    this installs it the same way): ``status --fleet`` reads the top by its path."""
    f = synced
    c = f.container(HUB)
    if f.run(HUB, "grep", "-qx", "  role: hub", operator.CONFIG, check=False).returncode != 0:
        _hub_installed(f)
    operator.systemctl(c, "restart", timeout=240)
    return f


def _fleet(f) -> dict[str, dict]:
    document = json.loads(operator.memstrata(f.container(HUB), "status", "--fleet", "--json").stdout)
    assert "daemon" not in document, "answered by the hub's daemon"
    return {h["host"]: h for h in document["hosts"]}


def test_the_hub_sees_every_host_and_a_cut_spoke_silent_until_it_is_heard_again(hub_view):
    f = hub_view

    def listed() -> dict[str, dict]:
        hosts = _fleet(f)
        seen = {r: (h["state"], {a["id"]: a["behind_commits"] for a in h["agents"]}) for r, h in hosts.items()}
        behind = [r for r in AGENTS if seen[r][0] != "ok" or seen[r][1].get(AGENT[r]) != 0]
        if behind:  # said by _poll at its deadline: what the hub holds, and what each host behind says itself
            own = {r: operator.status(f.container(r)).get("sync") for r in behind}
            raise ValueError(f"not yet: {seen}; their own sync: {own}")
        return hosts

    hosts = poll(listed, 120, "the hub and both spokes listed with their agents, caught up")
    assert hosts[HUB]["hub"] is True and all(hosts[r]["version"] for r in AGENTS)
    for role in SPOKES:  # the last pushed commit, as the spoke says it and as the hub holds it
        agent = next(a for a in hosts[role]["agents"] if a["id"] == AGENT[role])
        assert agent["last_pushed"] == _hub_ref(f, agent["remote_ref"]) and agent["pushed_at"], agent

    f.cut("spoke-1")
    try:
        # only the cut spoke: spoke-2 keeps reporting every REPORT_S
        silent = lambda: (h := _fleet(f))["spoke-1"]["state"] == "silent" and h["spoke-2"]["state"] == "ok"  # noqa: E731
        poll(silent, SILENT_S + 90, "spoke-1 SILENT, spoke-2 not")
        text = operator.memstrata(f.container(HUB), "status", "--fleet").stdout
        assert "1 SILENT" in text and "spoke-1" in text, text
    finally:
        f.restore("spoke-1")
    poll(lambda: _fleet(f)["spoke-1"]["state"] == "ok", 90, "spoke-1 heard from again")
