"""The api room's in-process tests: every route through Starlette's TestClient over the real daemon.

``build_app`` is served in-process over a MemoryDaemon built on a real root
(tests/daemon/conftest.py): no socket, no uvicorn, no daemon subprocess.  The L4
routes run over the real broker on the embedded store (tests/daemon/conversation_service.py),
one per module, since opening the store is the slow part.  What is checked is
what a caller sees over HTTP: who may call (401 without a valid token, 403 for
another agent's or the administrator's routes), the body limits (413, before the
body is read), the request schemas (400 naming the field) and each route's
answer when the request is good.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from daemon.api.app import build_app
from daemon.common.daemon_limits import (
    MAX_MEMORY_BODY_BYTES,
    MAX_QUERY_CHARS,
    MAX_SEARCH_BODY_BYTES,
    MAX_SMALL_BODY_BYTES,
)
from daemon.common.tokens import read_token
from tests.daemon.conftest import Service
from tests.daemon.conversation_service import enable, l4_service
from tests.helpers import token_of
from tests.stand_in_embedder import StandInEmbedder

MEMORY = "/v1/memories/00000000-0000-4000-8000-000000000000"
# Every route that needs a token: (method, path, a request that passes the schema).
AGENT_ROUTES = [
    ("POST", "/v1/search", {"json": {"agent": "main", "q": "x"}}),
    ("GET", "/v1/search", {"params": {"agent": "main", "q": "x"}}),
    ("POST", "/v1/reindex", {"json": {"agent": "main"}}),
    ("POST", "/v1/memories", {"json": {"agent": "main", "text": "x"}}),
    ("GET", "/v1/memories", {"params": {"agent": "main"}}),
    ("DELETE", "/v1/memories", {"params": {"agent": "main", "dry_run": "true"}}),
    ("POST", "/v1/memories/search", {"json": {"agent": "main", "q": "x"}}),
    ("GET", "/v1/memories/search", {"params": {"agent": "main", "q": "x"}}),
    ("GET", MEMORY, {"params": {"agent": "main"}}),
    ("DELETE", MEMORY, {"params": {"agent": "main"}}),
    ("PUT", MEMORY, {"json": {"agent": "main", "text": "x"}}),
    ("GET", f"{MEMORY}/history", {"params": {"agent": "main"}}),
]
ADMIN_ROUTES = [
    ("POST", "/v1/admin/cleanup", {"json": {"execute": False}}),
    ("POST", "/v1/admin/backup", {"json": {}}),
    ("POST", "/v1/admin/restore", {"json": {"path": "/nowhere.tar"}}),
]


def _bearer(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _ids(routes) -> list[str]:
    return [f"{method} {path.replace(MEMORY, '/v1/memories/ID')}" for method, path, _ in routes]


class Api:
    """A TestClient over a service's daemon, and the tokens of its callers."""

    def __init__(self, service: Service, client: TestClient) -> None:
        self.service = service
        self.client = client
        self.admin = _bearer(read_token(service.daemon.tokens.admin_path))
        self.main = _bearer(token_of(service.root, "main"))
        self.beta = _bearer(token_of(service.root, "beta"))

    def call(self, method: str, path: str, headers: dict | None = None, **request):
        return self.client.request(method, path, headers=headers or {}, **request)


def _api_over(service: Service) -> Iterator[Api]:
    service.spoke_workspace()
    service.daemon.reconciler.all()  # beta is watched and has its token
    service.daemon.provision.ensure_admin_token()
    service.daemon.board.publish()
    with TestClient(build_app(service.daemon), raise_server_exceptions=False) as client:
        yield Api(service, client)


@pytest.fixture(scope="module")
def api(_service_template, tmp_path_factory) -> Iterator[Api]:
    """The API over a service without L4 (conversation.enabled: false); one per module (tests add, never
    remove: each reads what it wrote itself)."""
    root = tmp_path_factory.mktemp("api") / "root"
    shutil.copytree(_service_template, root, symlinks=True)
    service = Service(root, root / "memstrata.yaml").open()
    try:
        yield from _api_over(service)
    finally:
        service.close()


@pytest.fixture(scope="module")
def l4(_service_template, tmp_path_factory) -> Iterator[Api]:
    """The API over a service whose L4 is the embedded store, reachable; one per module."""
    root = tmp_path_factory.mktemp("api-l4") / "root"
    shutil.copytree(_service_template, root, symlinks=True)
    config = root / "memstrata.yaml"
    embedder = StandInEmbedder()
    enable(config, embedder)
    try:
        with l4_service(config) as service:
            yield from _api_over(service)
    finally:
        embedder.close()


def _error(response) -> str:
    return response.json()["error"]


def _names(field: str, response) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(field)}(?![\w-])", _error(response)) is not None


# ---------------------------------------------------------------- who may call


@pytest.mark.parametrize(
    ("method", "path", "request_"), AGENT_ROUTES + ADMIN_ROUTES, ids=_ids(AGENT_ROUTES + ADMIN_ROUTES)
)
def test_no_token_or_a_token_of_nobody_is_401(api, method, path, request_):
    for headers in ({}, _bearer("not-a-token"), {"Authorization": "Basic bWFpbg=="}):
        response = api.call(method, path, headers, **request_)
        assert response.status_code == 401, (headers, response.text)
        assert "token is required" in _error(response)


@pytest.mark.parametrize(("method", "path", "request_"), AGENT_ROUTES, ids=_ids(AGENT_ROUTES))
def test_another_agents_token_is_403(api, method, path, request_):
    response = api.call(method, path, api.beta, **request_)
    assert response.status_code == 403, response.text
    assert "belongs to agent 'beta', not 'main'" in _error(response)


@pytest.mark.parametrize(("method", "path", "request_"), ADMIN_ROUTES, ids=_ids(ADMIN_ROUTES))
def test_an_agents_token_on_an_administrators_route_is_403(api, method, path, request_):
    response = api.call(method, path, api.main, **request_)
    assert response.status_code == 403 and "administrator" in _error(response)


def test_reindexing_every_agent_needs_the_administrator(api):
    assert api.call("POST", "/v1/reindex", api.main, json={}).status_code == 403


def test_the_administrator_acts_for_known_agents_only(api):
    response = api.call("POST", "/v1/search", api.admin, json={"agent": "nobody", "q": "x"})
    assert response.status_code == 404 and "unknown agent 'nobody'" in _error(response)


def test_an_impersonation_attempt_is_audited(l4):
    assert l4.call("GET", "/v1/memories", l4.beta, params={"agent": "main"}).status_code == 403
    audit = l4.service.daemon.broker.audit.directory
    events = [json.loads(line) for path in audit.glob("memory-access-*.log") for line in path.read_text().splitlines()]
    assert any(e["event"] == "impersonation_denied" and (e["caller"], e["agent"]) == ("beta", "main") for e in events)


# ---------------------------------------------------------------- body limits


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/v1/search", MAX_SEARCH_BODY_BYTES),
        ("/v1/memories", MAX_MEMORY_BODY_BYTES),
        ("/v1/reindex", MAX_SMALL_BODY_BYTES),
        ("/v1/admin/backup", MAX_SMALL_BODY_BYTES),
    ],
)
def test_a_body_over_the_routes_limit_is_413_and_the_connection_closes(api, path, limit):
    headers = api.admin if path.startswith("/v1/admin") else api.main
    response = api.call("POST", path, headers, content=b" " * (limit + 1))
    assert response.status_code == 413, response.text
    assert f"{limit:,}" in _error(response) and response.headers["connection"] == "close"
    assert api.call("POST", path, headers, content=b" " * limit).status_code != 413, "the limit itself is allowed"


def test_a_body_sent_without_a_length_is_counted_as_it_comes(api):
    def chunks():
        for _ in range(MAX_SEARCH_BODY_BYTES // 1024 + 2):
            yield b" " * 1024

    response = api.call("POST", "/v1/search", api.main, content=chunks())
    assert response.status_code == 413 and "over the limit" in _error(response)


def test_a_route_that_takes_no_body_refuses_one(api):
    response = api.call("GET", "/v1/status", content=b"{}")
    assert response.status_code == 413 and "takes no request body" in _error(response)


def test_a_query_over_the_limit_is_413_naming_both_figures(api):
    response = api.call("POST", "/v1/search", api.main, json={"agent": "main", "q": "x" * (MAX_QUERY_CHARS + 1)})
    assert response.status_code == 413
    assert f"{MAX_QUERY_CHARS + 1:,}" in _error(response) and f"{MAX_QUERY_CHARS:,}" in _error(response)


# ---------------------------------------------------------------- schemas


@pytest.mark.parametrize(
    ("method", "path", "request_", "field"),
    [
        ("POST", "/v1/search", {"json": {"agent": "main"}}, "q"),
        ("POST", "/v1/search", {"json": {"q": "x"}}, "agent"),
        ("POST", "/v1/search", {"json": {"agent": "Main!", "q": "x"}}, "agent"),
        ("POST", "/v1/search", {"json": {"agent": "main", "q": "x", "limit": "ten"}}, "limit"),
        ("POST", "/v1/search", {"json": {"agent": "main", "q": "x", "mode": "fuzzy"}}, "mode"),
        ("POST", "/v1/search", {"json": {"agent": "main", "q": 7}}, "q"),
        ("GET", "/v1/search", {"params": {"agent": "main", "q": "x", "explain": "maybe"}}, "explain"),
        ("POST", "/v1/memories", {"json": {"agent": "main", "text": "x", "type": "gossip"}}, "type"),
        ("POST", "/v1/memories", {"json": {"agent": "main", "text": "x", "expires": "soon"}}, "expires"),
        ("POST", "/v1/memories", {"json": {"agent": "main", "text": "x", "write_id": "a b"}}, "write_id"),
        ("PUT", MEMORY, {"json": {"agent": "main", "text": "x", "colour": "red"}}, "colour"),
        ("DELETE", "/v1/memories", {"params": {"agent": "main", "visibility": "everyone"}}, "visibility"),
        ("GET", "/v1/memories", {"params": {"agent": "main", "limit": "1.5"}}, "limit"),
        ("POST", "/v1/reindex", {"json": {"agent": "main", "rebuild": "yes please"}}, "rebuild"),
    ],
    ids=lambda v: v if isinstance(v, str) and not v.startswith("/") else None,
)
def test_a_field_that_breaks_the_schema_is_400_naming_it(api, method, path, request_, field):
    response = api.call(method, path, api.main, **request_)
    assert response.status_code == 400, response.text
    assert _names(field, response), _error(response)


@pytest.mark.parametrize(
    ("body", "says"),
    [(b"{not json", "not JSON"), (b"[1, 2]", "JSON object"), (b'"q"', "JSON object"), (b"\xff\xfe", "not JSON")],
)
def test_a_body_that_is_not_a_json_object_is_400(api, body, says):
    response = api.call("POST", "/v1/search", api.main, content=body)
    assert response.status_code == 400 and says in _error(response)


def test_an_admin_schema_names_its_field(api):
    response = api.call("POST", "/v1/admin/cleanup", api.admin, json={})
    assert response.status_code == 400 and _names("execute", response)
    response = api.call("POST", "/v1/admin/cleanup", api.admin, json={"execute": True, "max_age_days": -1})
    assert response.status_code == 400 and _names("max_age_days", response)
    response = api.call("POST", "/v1/admin/backup", api.admin, json={"keep": 0})
    assert response.status_code == 400 and _names("keep", response)


def test_unknown_routes_and_methods(api):
    assert api.call("GET", "/v1/nowhere").status_code == 404
    response = api.call("PATCH", "/v1/search", api.main, json={})
    assert response.status_code == 405 and "PATCH" in _error(response)


# ---------------------------------------------------------------- L3 routes


def test_status_to_each_caller(api):
    anonymous = api.call("GET", "/v1/status").json()
    assert anonymous["access"] == "none" and anonymous["counts"]["agents"] == 2 and "agents" not in anonymous
    mine = api.call("GET", "/v1/status", api.beta).json()
    assert mine["access"] == "agent beta" and [a["id"] for a in mine["agents"]] == ["beta"]
    everything = api.call("GET", "/v1/status", api.admin).json()
    assert everything["access"] == "admin" and [a["id"] for a in everything["agents"]] == ["main", "beta"]


def test_search_by_post_and_by_get_find_the_same(api):
    (api.service.workspace / "MEMORY.md").write_text("# MEMORY\nthe cherimoya order ships in May\n")
    api.service.daemon.reconciler.all()
    post = api.call("POST", "/v1/search", api.main, json={"agent": "main", "q": "cherimoya", "explain": True})
    get = api.call("GET", "/v1/search", api.main, params={"agent": "main", "q": "cherimoya", "mode": "fts"})
    for response in (post, get):
        assert response.status_code == 200, response.text
        assert [r["path"] for r in response.json()["results"]] == ["MEMORY.md"]
    assert post.json()["results"][0]["ranks"], "explain says which ranked list it came from"
    filtered = api.call("GET", "/v1/search", api.main, params={"agent": "main", "q": "cherimoya", "layer": "core"})
    assert filtered.status_code == 200 and filtered.json()["results"] == [], "MEMORY.md is no core file"


def test_a_rebuild_is_run_by_the_loop_and_answers_what_it_did(api):
    with api.service.loop_running():
        answer = api.call("POST", "/v1/reindex", api.admin, json={"rebuild": True})
    assert answer.status_code == 200, answer.text
    assert set(answer.json()) == {"main", "beta"} and all(a["rebuilt"] for a in answer.json().values())


# ---------------------------------------------------------------- L4 routes


def test_a_memory_is_added_read_listed_found_updated_and_deleted(l4):
    added = l4.call("POST", "/v1/memories", l4.main, json={"agent": "main", "text": "the VPN key rotates on Mondays"})
    assert added.status_code == 200, added.text
    assert added.json()["queued"] is False and added.json()["visibility"] == "private"
    (result,) = added.json()["results"]
    memory = f"/v1/memories/{result['id']}"

    got = l4.call("GET", memory, l4.main, params={"agent": "main"})
    assert got.status_code == 200 and got.json()["memory"] == "the VPN key rotates on Mondays"
    listed = l4.call("GET", "/v1/memories", l4.main, params={"agent": "main", "limit": 1000})
    assert result["id"] in [m["id"] for m in listed.json()["results"]]
    for found in (
        l4.call("POST", "/v1/memories/search", l4.main, json={"agent": "main", "q": "when does the VPN key rotate"}),
        l4.call("GET", "/v1/memories/search", l4.main, params={"agent": "main", "q": "VPN key", "limit": 5}),
    ):
        assert found.status_code == 200 and found.json()["layer"] == "conversation"
        assert result["id"] in [m["id"] for m in found.json()["results"]]

    updated = l4.call("PUT", memory, l4.main, json={"agent": "main", "text": "the VPN key rotates on Tuesdays"})
    assert updated.status_code == 200 and updated.json()["memory"] == "the VPN key rotates on Tuesdays"
    history = l4.call("GET", f"{memory}/history", l4.main, params={"agent": "main"})
    assert [e["event"] for e in history.json()["results"]] == ["ADD", "UPDATE"]

    assert l4.call("GET", memory, l4.beta, params={"agent": "beta"}).status_code == 404, "private to main"
    deleted = l4.call("DELETE", memory, l4.main, params={"agent": "main"})
    assert deleted.status_code == 200 and deleted.json()["deleted"] == result["id"]
    assert l4.call("GET", memory, l4.main, params={"agent": "main"}).status_code == 404


def test_delete_all_as_a_dry_run_deletes_nothing(l4):
    added = l4.call(
        "POST", "/v1/memories", l4.beta, json={"agent": "beta", "text": "beta's scratch note", "type": "session"}
    )
    memory_id = added.json()["results"][0]["id"]
    dry = l4.call("DELETE", "/v1/memories", l4.beta, params={"agent": "beta", "type": "session", "dry_run": "true"})
    assert dry.status_code == 200 and memory_id in dry.json()["ids"]
    assert l4.call("GET", f"/v1/memories/{memory_id}", l4.beta, params={"agent": "beta"}).status_code == 200


def test_bad_l4_requests_are_400_and_a_secret_is_422(l4):
    empty = l4.call("POST", "/v1/memories", l4.main, json={"agent": "main", "text": "   "})
    assert empty.status_code == 400
    secret = "sk-" + "testkey" * 4 + "1234"
    refused = l4.call("POST", "/v1/memories", l4.main, json={"agent": "main", "text": f"the key is {secret}"})
    assert refused.status_code == 422 and secret not in refused.text


def test_the_administrators_cleanup_backup_and_restore(l4, tmp_path):
    kept = l4.call("POST", "/v1/memories", l4.main, json={"agent": "main", "text": "the quince jam recipe"})
    memory_id = kept.json()["results"][0]["id"]
    cleanup = l4.call("POST", "/v1/admin/cleanup", l4.admin, json={"execute": False})
    assert cleanup.status_code == 200, cleanup.text
    assert cleanup.json()["mode"] == "dry-run" and cleanup.json()["scanned"] >= 1 and cleanup.json()["deleted"] == 0

    backup = l4.call("POST", "/v1/admin/backup", l4.admin, json={"keep": 2})
    assert backup.status_code == 200, backup.text
    archive = backup.json()["backup"]
    assert backup.json()["bytes"] > 0 and archive in backup.json()["kept"]

    assert l4.call("DELETE", f"/v1/memories/{memory_id}", l4.main, params={"agent": "main"}).status_code == 200
    restored = l4.call("POST", "/v1/admin/restore", l4.admin, json={"path": archive})
    assert restored.status_code == 200, restored.text
    back = l4.call("GET", f"/v1/memories/{memory_id}", l4.main, params={"agent": "main"})
    assert back.status_code == 200 and back.json()["memory"] == "the quince jam recipe"
    missing = l4.call("POST", "/v1/admin/restore", l4.admin, json={"path": str(tmp_path / "no-backup.tar")})
    assert missing.status_code == 404


def test_l4_routes_without_l4_say_it_is_disabled(api):
    response = api.call("GET", "/v1/memories", api.main, params={"agent": "main"})
    assert response.status_code == 503 and "disabled" in _error(response)
