"""The shared core through running daemons: the hub's shared/ pushed to a bare remote (a plain path), a spoke's
daemon fetching it into its main workspace's shared/, read-only, where every agent's core bundle reads it;
a spoke's edit never pushed and undone, said in status; the remote gone, the last good copy kept with its age,
and kept over a restart.

Real daemon subprocesses, real git; every wait has a deadline and nothing asserts how fast anything is.
"""

from __future__ import annotations

import itertools
import json
import stat
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from daemon.front.daemon_client import _UnixConnection
from tests.helpers import LEAN, bare_remote, git, init_root, ref_of, run_cli, wait_for

CORE_REF = "refs/memstrata/shared/core"


def _root(tmp_path: Path, remote: Path, host: str, role: str) -> Path:
    remote_git = {**LEAN["git"], "remote": str(remote), "push_retry_max_s": 2}
    fleet = {"host": host, "role": role, "shared_poll_s": 1}
    return init_root(tmp_path / host, **{**LEAN, "git": remote_git, "fleet": fleet})


def _core(d) -> dict:
    return d.status()["sync"]["shared_core"]


def _bundle(config: Path, agent: str) -> str:
    return run_cli("core", "--agent", agent, config=config).stdout


def _metrics(d) -> dict:
    conn = _UnixConnection(str(d.socket), timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {d.admin_token()}"})
    return {
        s.name: s.value
        for family in text_string_to_metric_families(conn.getresponse().read().decode())
        for s in family.samples
    }


def _forced(remote: Path, ref: str) -> int:
    """Updates of ``ref`` in the remote's reflog that were not fast-forwards."""
    log = git(remote, "reflog", "show", "--format=%H", ref).split()
    return sum(1 for new, old in itertools.pairwise(log) if git(remote, "merge-base", old, new).strip() != old)


def test_the_hubs_shared_core_reaches_a_spokes_agents_read_only_and_a_spokes_edit_is_undone(tmp_path, daemons):
    remote = bare_remote(tmp_path / "fleet.git")
    hub_config, spoke_config = _root(tmp_path, remote, "hub", "hub"), _root(tmp_path, remote, "spoke-1", "spoke")
    hub_shared = hub_config.parent / "workspace" / "shared"
    spoke_shared = spoke_config.parent / "workspace" / "shared"
    (hub_shared / "CLUSTER.md").write_text("# cluster\n\nRule one: answer in French.\n")
    run_cli("agent", "add", "agent-c", config=spoke_config)
    hub, spoke = daemons(hub_config), daemons(spoke_config)

    first = wait_for(lambda: ref_of(remote, CORE_REF), what="the hub's shared core on the remote")
    assert git(remote, "show", f"{CORE_REF}:CLUSTER.md").endswith("Rule one: answer in French.\n")
    wait_for(lambda: "answer in French" in _bundle(spoke_config, "agent-c"), what="the spoke's agent reads the core")
    assert stat.S_IMODE((spoke_shared / "CLUSTER.md").stat().st_mode) == 0o444, "installed read-only"
    h = wait_for(lambda: (c := _core(hub))["commit"] == first and c, what="the hub's status names the commit")
    assert h["role"] == "hub" and h["reachable"] and h["last_push"] and h["age_s"] is not None
    s = wait_for(lambda: (c := _core(spoke))["commit"] == first and c, what="the spoke's status names the commit")
    assert s["role"] == "spoke" and s["reachable"] and s["last_fetch"] and s["date"] and s["local_edit"] is None

    # the hub changes it: the next commit reaches the spoke's agents (and a new file, a removed one)
    (hub_shared / "CLUSTER.md").write_text("# cluster\n\nRule one: answer in Welsh.\n")
    (hub_shared / "TEAM.md").write_text("# team\n\nagent-c writes the reports.\n")
    wait_for(lambda: "writes the reports" in _bundle(spoke_config, "agent-c"), what="the hub's change on the spoke")
    assert "answer in Welsh" in _bundle(spoke_config, "agent-c")
    second = ref_of(remote, CORE_REF)
    assert second != first and git(remote, "rev-parse", f"{second}^").strip() == first, "one line, never forced"
    wait_for(lambda: _core(spoke)["commit"] == second, what="the spoke's status names the new commit")

    def searched() -> bool:  # and every agent's index has it (the main workspace's tracker took the new copy in)
        out = run_cli("search", "writes the reports", "--agent", "agent-c", "--json", config=spoke_config).stdout
        return any(r["path"] == "shared/TEAM.md" for r in json.loads(out)["results"])

    wait_for(searched, what="the hub's new file found by the spoke's agent's search")

    # a spoke's edit: never pushed, said in status, the hub's copy written back
    (spoke_shared / "CLUSTER.md").chmod(0o644)
    (spoke_shared / "CLUSTER.md").write_text("# cluster\n\nRule one: a spoke's own rule.\n")
    (spoke_shared / "LOCAL.md").write_text("# a spoke's own file\n")
    edit = wait_for(lambda: _core(spoke)["local_edit"], what="status says the local edit was not propagated")
    assert set(edit["files"]) == {"CLUSTER.md", "LOCAL.md"} and "not propagated" in edit["note"]
    kept = Path(edit["kept_in"])  # the edit is not lost: copied aside before the hub's copy was written back
    assert (kept / "CLUSTER.md").read_text().endswith("a spoke's own rule.\n") and (kept / "LOCAL.md").exists()
    wait_for(
        lambda: "answer in Welsh" in _bundle(spoke_config, "agent-c") and not (spoke_shared / "LOCAL.md").exists(),
        what="the hub's copy written back over the edit",
    )
    text = " ".join(run_cli("status", config=spoke_config).stdout.split())
    assert "local edit of shared/ not propagated" in text and "shared core: spoke" in text
    assert ref_of(remote, CORE_REF) == second and "spoke's own" not in git(remote, "show", f"{CORE_REF}:CLUSTER.md")
    assert _metrics(spoke)["memstrata_shared_core_local_edits"] >= 1
    audit = (spoke_config.parent / "workspace" / "logs" / "security").rglob("*")
    assert any("shared_local_edit" in p.read_text(errors="replace") for p in audit if p.is_file())
    assert _forced(remote, CORE_REF) == 0
    hub_text = " ".join(run_cli("status", config=hub_config).stdout.split())
    assert "shared core: hub" in hub_text


def test_a_spoke_keeps_the_last_good_copy_while_the_remote_is_gone_says_its_age_and_keeps_it_over_a_restart(
    tmp_path, daemons
):
    remote = bare_remote(tmp_path / "fleet.git")
    hub_config, spoke_config = _root(tmp_path, remote, "hub", "hub"), _root(tmp_path, remote, "spoke-1", "spoke")
    (hub_config.parent / "workspace" / "shared" / "CLUSTER.md").write_text("# cluster\n\nThe good copy.\n")
    spoke_shared = spoke_config.parent / "workspace" / "shared"
    hub = daemons(hub_config)
    commit = wait_for(lambda: ref_of(remote, CORE_REF), what="the hub's shared core on the remote")
    hub.stop()
    spoke = daemons(spoke_config)
    wait_for(lambda: _core(spoke)["commit"] == commit, what="the spoke fetched it")

    remote.rename(tmp_path / "gone.git")
    s = wait_for(lambda: (c := _core(spoke))["reachable"] is False and c, what="status says the remote is gone")
    assert s["commit"] == commit and s["age_s"] is not None and s["last_error"] and s["failing_since"]
    assert "The good copy." in (spoke_shared / "CLUSTER.md").read_text(), "the last good copy stays"
    text = " ".join(run_cli("status", config=spoke_config).stdout.split())
    assert "shared core: remote UNREACHABLE" in text and "the last good copy kept" in text and "age" in text
    assert _metrics(spoke)["memstrata_shared_core_reachable"] == 0

    spoke.stop()
    spoke = daemons(spoke_config)
    s = wait_for(lambda: (c := _core(spoke))["reachable"] is False and c, what="the restarted spoke tried")
    assert s["commit"] == commit and s["age_s"] is not None, "the copy and its age known after a restart"
    assert "The good copy." in (spoke_shared / "CLUSTER.md").read_text()
    (tmp_path / "gone.git").rename(remote)
    wait_for(lambda: _core(spoke)["reachable"] is True, timeout=30, what="the remote answers again")
    assert (
        json.loads(run_cli("status", "--json", config=spoke_config).stdout)["sync"]["shared_core"]["commit"] == commit
    )
