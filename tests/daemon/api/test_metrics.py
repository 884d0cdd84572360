"""``/healthz``, ``/readyz`` and ``/metrics`` of a real daemon, on its socket and on a loopback port,
read by prometheus-client's own parser: per caller, what it may see; never a path or a secret."""

from __future__ import annotations

import http.client
import json
import re
import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.front.daemon_client import DaemonClient, _UnixConnection
from tests.helpers import FAKE_API_KEY, FAST, REPO_ROOT, init_root, run_cli, token_of, wait_for, wait_reachable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(conn: http.client.HTTPConnection, path: str, token: str | None = None) -> tuple[int, str, str]:
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    response = conn.getresponse()
    return response.status, response.getheader("Content-Type") or "", response.read().decode()


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample, parsed the way Prometheus parses the text format."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def running(tmp_path, daemons):
    port = _free_port()
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"}, metrics={"port": port})
    run_cli("agent", "add", "ops-1", config=config)
    d = daemons(config)
    wait_reachable(d)
    return d, config, port


def test_health_readiness_and_metrics_per_caller(running, tmp_path):
    d, _config, port = running
    secret = tmp_path / "workspace" / "memory" / "2026-11-20.md"
    secret.write_text(f"# notes\n\napi_key = {FAKE_API_KEY}\n")
    wait_for(lambda: d.agent("main")["held_back"], what="the secret held back")
    admin = d.admin_token()
    with DaemonClient(d.socket, timeout=30, token=admin) as client:
        client.search("main", "memory")
        client.add("main", "qdrant 在 6333 端口", visibility="private")

    unix = _UnixConnection(d.socket, timeout=30)
    assert _get(unix, "/healthz")[::2] == (200, '{"status":"ok"}')
    status, _, body = _get(unix, "/readyz")
    assert status == 200 and json.loads(body) == {"ready": True, "reasons": []}

    status, content_type, anonymous = _get(unix, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    seen = _series(anonymous)
    assert seen[("memstrata_ready", ())] == 1 and seen[("memstrata_agents", ())] == 2
    assert seen[("memstrata_held_back", ())] == 1 and seen[("memstrata_l4_reachable", ())] == 1
    assert seen[("memstrata_process_resident_memory_bytes", ())] > 10_000_000
    assert not any(("agent", "main") in labels for _, labels in seen), "per-agent series need a token"

    full = _series(_get(unix, "/metrics", admin)[2])
    main = (("agent", "main"),)
    assert full[("memstrata_agent_files", main)] == d.agent("main")["files"]
    assert full[("memstrata_agent_held_back_files", main)] == 1
    assert full[("memstrata_index_chunks", main)] == d.agent("main")["index"]["chunks"] > 0
    assert full[("memstrata_commits_total", main)] == d.agent("main")["commits_total"]
    assert ("memstrata_agent_files", (("agent", "ops-1"),)) in full
    for route in ("search", "memory_add"):
        assert full[("memstrata_request_duration_seconds_count", (("route", route),))] == 1, route
        assert full[("memstrata_request_duration_seconds_bucket", (("le", "+Inf"), ("route", route)))] == 1

    as_ops = _series(_get(unix, "/metrics", token_of(tmp_path, "ops-1"))[2])
    agents = {dict(labels).get("agent") for _, labels in as_ops} - {None}
    assert agents == {"ops-1"}, "an agent's token: its own series only"

    loopback = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    over_tcp = _get(loopback, "/metrics")[2]
    assert ("memstrata_agent_files", main) in _series(over_tcp), "the port shows the administrator's view"
    assert _get(loopback, "/readyz")[0] == 200 and _get(loopback, "/healthz")[0] == 200
    assert _get(loopback, "/v1/status")[0] == 404, "the port serves health and metrics, nothing else"

    dashboard = json.loads((REPO_ROOT / "docs" / "grafana-memstrata.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queried = {name for expr in exprs for name in re.findall(r"memstrata_\w+", expr)}
    full_text = _get(unix, "/metrics", admin)[2]
    served = {name for name, _ in full} | {f.name for f in text_string_to_metric_families(full_text)}  # empty too
    assert queried and queried <= served, f"the example dashboard asks for series not served: {queried - served}"
    for text in (anonymous, over_tcp, _get(unix, "/metrics", admin)[2]):
        assert FAKE_API_KEY not in text and "2026-11-20.md" not in text and str(tmp_path) not in text
    assert d.stop() == 0


def test_a_taken_metrics_port_stops_the_start_with_one_line(tmp_path, daemons):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = init_root(tmp_path, **FAST, vectors={"backend": "off"}, conversation={"enabled": False},
                           metrics={"port": port})  # fmt: skip
        proc = run_cli("run", config=config, check=False)
    assert proc.returncode == 1 and f"metrics.port: cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
