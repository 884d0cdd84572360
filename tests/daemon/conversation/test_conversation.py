"""L4 through the real daemon: tokens, visibility, isolation on every path, secrets, audit."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from tests.helpers import FAKE_API_KEY, FAST, init_root, registry_of, run_cli, token_of, wait_for, wait_reachable


class Cluster:
    def __init__(self, root: Path, daemon) -> None:
        self.root, self.daemon = root, daemon

    def client(self, agent: str, token: str | None = None) -> DaemonClient:
        return DaemonClient(self.daemon.socket, timeout=60, token=token or token_of(self.root, agent))

    def audit(self) -> list[dict]:
        lines = []
        for path in sorted((self.root / "workspace" / "logs" / "security").glob("memory-access-*.log")):
            lines += [json.loads(line) for line in path.read_text().splitlines()]
        return lines


@pytest.fixture
def cluster(tmp_path, daemons) -> Cluster:
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", "--project", "infra", config=config)
    run_cli("agent", "add", "b", "--project", "web", config=config)
    run_cli("agent", "add", "c", "--project", "infra", config=config)
    registry = registry_of(tmp_path)
    data = yaml.safe_load(registry.read_text())
    data["projects"]["infra"]["keywords"] = ["qdrant"]
    registry.write_text(yaml.safe_dump(data))
    daemon = daemons(config)
    wait_reachable(daemon)
    return Cluster(tmp_path, daemon)


def test_tokens_are_issued_private_and_checked(cluster):
    workspace = cluster.root / "workspace" / "agents" / "a-workspace"
    token_file = workspace / ".memstrata" / "token"
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert ".memstrata/" in (workspace / ".gitignore").read_text()
    with cluster.client("a") as a:
        assert a.add("a", "我的第一条记忆")["queued"] is False
    with cluster.client("a", token="not-a-token") as wrong, pytest.raises(DaemonRequestError) as no_token:
        wrong.memory_search("a", "记忆")
    assert no_token.value.status == 401
    with cluster.client("b") as b, pytest.raises(DaemonRequestError) as other:
        b.memory_search("a", "记忆")  # b's token, asking as a
    assert other.value.status == 403 and "belongs to agent 'b'" in str(other.value)
    assert {"event": "impersonation_denied", "caller": "b", "agent": "a"}.items() <= cluster.audit()[-1].items()


def test_private_and_project_memories_never_reach_another_agent(cluster):
    with cluster.client("a") as a, cluster.client("b") as b, cluster.client("c") as c:
        private = a.add("a", "a 的私密记忆：备份密钥在 3 号柜子", visibility="private")
        infra = a.add("a", "qdrant 集群迁移到新节点")  # keyword: inferred into a's project infra
        assert (infra["visibility"], infra["project_id"], infra["visibility_inferred"]) == ("project", "infra", True)
        public = run_cli(
            "add",
            "备份策略每天凌晨执行",
            "--agent",
            "main",
            "--visibility",
            "public",
            "--json",
            config=cluster.daemon.config,
        )
        assert json.loads(public.stdout)["visibility"] == "public"
        private_id = private["results"][0]["id"]
        infra_id = infra["results"][0]["id"]

        # search: b sees only the public memory; c (infra) sees the project one, not a's private one
        b_found = {r["memory"] for r in b.memory_search("b", "备份 密钥 qdrant 节点", limit=20)["results"]}
        assert b_found == {"备份策略每天凌晨执行"}
        c_found = {r["memory"] for r in c.memory_search("c", "备份 密钥 qdrant 节点", limit=20)["results"]}
        assert c_found == {"备份策略每天凌晨执行", "qdrant 集群迁移到新节点"}
        a_found = {r["memory"] for r in a.memory_search("a", "备份 密钥 qdrant 节点", limit=20)["results"]}
        assert len(a_found) == 3

        # get_all
        assert {r["memory"] for r in b.get_all("b")["results"]} == {"备份策略每天凌晨执行"}
        assert private_id not in {r["id"] for r in c.get_all("c")["results"]}

        # get and delete by id: another's private memory does not even exist for b
        for call in (b.get, b.delete):
            with pytest.raises(DaemonRequestError) as denied:
                call("b", private_id)
            assert denied.value.status == 404
        with pytest.raises(DaemonRequestError) as not_member:
            b.get("b", infra_id)
        assert not_member.value.status == 404
        assert c.get("c", infra_id)["project_id"] == "infra"
        with pytest.raises(DaemonRequestError) as not_owner:
            c.delete("c", infra_id)  # c may read it, only a may delete it
        assert not_owner.value.status == 403
        assert a.get("a", private_id)["memory"].startswith("a 的私密记忆")

    events = [(e["event"], e.get("agent"), e.get("memory_id")) for e in cluster.audit()]
    assert ("read_denied", "b", private_id) in events and ("delete_denied", "b", private_id) in events
    assert ("read_denied", "b", infra_id) in events and ("delete_denied", "c", infra_id) in events
    assert all("备份" not in json.dumps(e, ensure_ascii=False) for e in cluster.audit())  # never the text


def test_write_rules_are_enforced_and_audited(cluster):
    with cluster.client("b") as b:
        with pytest.raises(DaemonRequestError) as public:
            b.add("b", "everyone should know", visibility="public")
        assert public.value.status == 403
        with pytest.raises(DaemonRequestError) as project:
            b.add("b", "infra secret plan", project="infra")
        assert project.value.status == 403 and "not a member of project 'infra'" in str(project.value)
        guessed = b.add("b", "qdrant is fun")  # infra keyword, but b is not in infra
        assert guessed["visibility"] == "private"
        with pytest.raises(DaemonRequestError) as bad_type:
            b.add("b", "x", type="gossip")
        assert bad_type.value.status == 400 and "unknown memory type" in str(bad_type.value)
        session = b.add("b", "在讨论部署", type="session")
        assert session["expiration_date"] is not None and session["memory_type"] == "session"
    assert [e["event"] for e in cluster.audit()].count("write_denied") == 2


def test_secrets_are_refused_naming_the_kind_never_the_secret(cluster):
    with cluster.client("a") as a, pytest.raises(DaemonRequestError) as refused:
        a.add("a", f"the gateway key is {FAKE_API_KEY}")
    assert refused.value.status == 422 and "api_key" in str(refused.value)
    assert FAKE_API_KEY not in str(refused.value)
    proc = run_cli("add", f"key {FAKE_API_KEY}", "--agent", "a", config=cluster.daemon.config, check=False)
    assert proc.returncode == 1 and "api_key" in proc.stderr and FAKE_API_KEY not in proc.stderr + proc.stdout
    assert FAKE_API_KEY not in cluster.daemon.log()
    assert any(e["event"] == "secret_refused" and e["kinds"] == ["api_key"] for e in cluster.audit())
    with cluster.client("a") as a:
        assert a.get_all("a")["results"] == []  # nothing was stored


def test_cli_add_and_search_layers(cluster):
    cfg = cluster.daemon.config
    out = run_cli("add", "用户偏好 Tailscale 组网", "--agent", "a", "--type", "preference", config=cfg).stdout
    assert "remembered" in out and "never expires" in out
    conv = json.loads(
        run_cli("search", "Tailscale", "--agent", "a", "--layer", "conversation", "--json", config=cfg).stdout
    )
    assert conv["layer"] == "conversation" and conv["degraded"] is False
    assert conv["results"][0]["memory"] == "用户偏好 Tailscale 组网"
    assert conv["results"][0]["memory_type"] == "preference"
    both = json.loads(run_cli("search", "Tailscale", "--agent", "a", "--layer", "all", "--json", config=cfg).stdout)
    assert both["results"][0]["source"] == "conversation"
    status = json.loads(run_cli("status", "--json", config=cfg).stdout)["conversation"]
    assert status["backend"] == "embedded" and status["reachable"] and status["queue"]["depth"] == 0
    assert "conversation (L4): embedded" in run_cli("status", config=cfg).stdout
    # the Edge shard's index, in words too (figures refreshed on the store's periodic ping)
    index = wait_for(
        lambda: (json.loads(run_cli("status", "--json", config=cfg).stdout)["conversation"]["index"] or {}).get(
            "points"
        ),
        timeout=60,
        what="the shard's figures in status",
    )
    assert f"of {index:,} points in the HNSW index" in run_cli("status", config=cfg).stdout


def test_a_broken_registry_is_named_at_start_and_kept_out_on_reload(tmp_path, daemons):
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", "--project", "infra", config=config)
    registry = registry_of(tmp_path)
    good = registry.read_text()
    registry.write_text(good.replace("can_write_public: false", "can_write_public: 'maybe'"))
    proc = run_cli("run", config=config, check=False)
    assert proc.returncode == 1
    assert "project_registry.yaml: agents.a.can_write_public (line" in proc.stderr

    registry.write_text(good)
    daemon = daemons(config)
    wait_reachable(daemon)
    edited = registry.with_name(registry.name + ".edit")  # whole at once: a reader never sees it half written
    edited.write_text(good + "projects_typo: {}\n")
    edited.replace(registry)
    daemon.signal(signal.SIGHUP)  # not needed for the registry, which is re-read when it changes; harmless
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        assert a.add("a", "still in infra", project="infra")["project_id"] == "infra"
    error = daemon.status()["conversation"]["registry_error"]
    assert "projects_typo" in error and "previous registry stays in force" in error


def test_a_registry_written_in_two_halves_keeps_the_agents_until_it_is_whole(tmp_path, daemons):
    """An operator's editor truncates the registry and writes it in two goes (issue 46: a test writing it so
    under load had the daemon apply it empty, every agent gone).  Half way the daemon keeps the registry in
    force and status says the file was refused; the completing write is applied."""
    config = init_root(tmp_path, **FAST)
    run_cli("agent", "add", "a", "--project", "infra", config=config)
    run_cli("agent", "add", "b", config=config)
    registry = registry_of(tmp_path)
    data = yaml.safe_load(registry.read_text())
    data["agents"]["b"]["projects"] = ["infra"]  # the edit: b joins infra
    whole = yaml.safe_dump(data, sort_keys=False)
    first = whole[: whole.rindex("can_write_public") + len("can_w")]  # cut inside a key: does not parse
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(first)
    daemon = daemons(config)
    wait_reachable(daemon)

    def a_still_in_infra(note: str) -> None:
        with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
            assert a.add("a", note, project="infra")["project_id"] == "infra"

    with registry.open("w") as editor:  # truncated: no document yet
        a_still_in_infra("written while the registry is empty")
        error = daemon.status()["conversation"]["registry_error"]
        assert str(registry) in error and "refused" in error and "previous registry stays in force" in error
        editor.write(first)
        editor.flush()
        a_still_in_infra("written while the registry is half written")
        assert "invalid YAML" in daemon.status()["conversation"]["registry_error"]
        editor.write(whole[len(first) :])
    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "b")) as b:
        assert b.add("b", "b's first infra note", project="infra")["project_id"] == "infra"
    assert daemon.status()["conversation"]["registry_error"] == ""
    assert "refused: the file holds no YAML document" in daemon.log()


def test_the_administrator_acts_for_known_agents_only(cluster):
    admin = (cluster.root / "state" / "admin.token").read_text().strip()
    with cluster.client("a", token=admin) as as_admin:
        assert as_admin.add("b", "written by the administrator for b")["queued"] is False
        with pytest.raises(DaemonRequestError) as unknown:
            as_admin.add("ghost", "nobody")
    assert unknown.value.status == 404
    with cluster.client("b") as b:
        assert [m["memory"] for m in b.get_all("b")["results"]] == ["written by the administrator for b"]


def test_bad_requests_are_refused_without_marking_the_store_down(cluster):
    with cluster.client("a") as a:
        for cursor in ("0:not-a-point-id", "9:", "x"):
            with pytest.raises(DaemonRequestError) as bad_cursor:
                a.get_all("a", cursor=cursor)
            assert bad_cursor.value.status == 400 and "not a cursor" in str(bad_cursor.value)
        for call in (a.get, a.delete):
            with pytest.raises(DaemonRequestError) as bad_id:
                call("a", "../../etc/passwd")
            assert bad_id.value.status == 404
        assert (
            a.memory_search("a", "x" * 4096)["degraded"] is False
        )  # the longest query (daemon/common/daemon_limits.py)
    assert cluster.daemon.status()["conversation"]["reachable"] is True
