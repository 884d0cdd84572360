"""daemon/api/app.py: the HTTP app over the in-process service (Starlette's test client, no socket, no daemon)."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from daemon.api.app import build_app
from daemon.common.daemon_limits import MAX_QUERY_CHARS
from daemon.common.tokens import read_token
from tests.helpers import token_of


@pytest.fixture
def api(service):
    service.daemon.provision.ensure_admin_token()
    service.daemon.board.publish()
    with TestClient(build_app(service.daemon)) as client:
        yield client


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_status_shows_each_caller_what_it_may_see(api, service):
    anonymous = api.get("/v1/status").json()
    assert anonymous["access"] == "none" and "agents" not in anonymous and anonymous["counts"]["agents"] == 1
    own = api.get("/v1/status", headers=_bearer(token_of(service.root, "main"))).json()
    assert own["access"] == "agent main" and [a["id"] for a in own["agents"]] == ["main"]
    admin = read_token(service.daemon.tokens.admin_path)
    assert api.get("/v1/status", headers=_bearer(admin)).json()["access"] == "admin"
    stranger = api.get("/v1/status", headers=_bearer("not-a-token")).json()
    assert "belongs to no agent" in stranger["note"]


def test_a_search_needs_the_agents_own_token(api, service):
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nthe sapodilla crate\n")
    service.daemon.reconciler.all()
    body = {"agent": "main", "q": "sapodilla"}
    assert api.post("/v1/search", json=body).status_code == 401
    assert api.post("/v1/search", json=body, headers=_bearer("wrong")).status_code == 401
    answer = api.post("/v1/search", json=body, headers=_bearer(token_of(service.root, "main")))
    assert answer.status_code == 200 and [h["path"] for h in answer.json()["results"]] == ["MEMORY.md"]


def test_another_agents_token_is_forbidden(api, service):
    service.spoke_workspace()
    service.daemon.reconciler.all()
    answer = api.post("/v1/search", json={"agent": "main", "q": "x"}, headers=_bearer(token_of(service.root, "beta")))
    assert answer.status_code == 403


def test_errors_are_mapped_to_statuses(api, service):
    admin = _bearer(read_token(service.daemon.tokens.admin_path))
    main = _bearer(token_of(service.root, "main"))
    assert api.post("/v1/search", json={"agent": "nobody", "q": "x"}, headers=admin).status_code == 404
    assert api.post("/v1/search", json={"agent": "main"}, headers=main).status_code == 400  # q is required
    assert api.post("/v1/search", content=b"{not json", headers=main).status_code == 400
    disabled = api.post("/v1/memories", json={"agent": "main", "text": "x"}, headers=main)
    assert disabled.status_code == 503 and "disabled" in disabled.json()["error"]
    assert api.get("/v1/nowhere").status_code == 404


def test_a_reindex_is_run_by_the_loop(api, service):
    with service.loop_running():
        answer = api.post("/v1/reindex", json={"agent": "main"}, headers=_bearer(token_of(service.root, "main")))
    assert answer.status_code == 200 and answer.json()["main"]["rebuilt"] is False
    everyone = api.post("/v1/reindex", json={}, headers=_bearer(token_of(service.root, "main")))
    assert everyone.status_code == 403, "every agent needs the administrator"


def test_an_agent_the_daemon_does_not_know_is_a_404_naming_it(api, service, tmp_path):
    """A valid token of an agent the daemon has no workspace for: the part that looks the agent up says so
    (daemon/local/search.py, the reindex), as the domain's UnknownAgentError, answered 404 as before."""
    elsewhere = tmp_path / "ghost-workspace"  # not under the agents' directory: the daemon never sees it
    elsewhere.mkdir()
    ghost = _bearer(service.daemon.tokens.issue("ghost", elsewhere))
    with service.loop_running():
        searched = api.post("/v1/search", json={"agent": "ghost", "q": "x"}, headers=ghost)
        reindexed = api.post("/v1/reindex", json={"agent": "ghost"}, headers=ghost)
    for answer in (searched, reindexed):
        assert answer.status_code == 404 and answer.json() == {"error": "unknown agent 'ghost'"}, answer.text


def test_the_longest_query_escaped_at_worst_is_read_and_one_more_character_is_the_query_limit(api, service):
    """The search body limit holds the longest query the query limit admits, every character escaped as
    json.dumps escapes it by default (an emoji: "\\ud83d\\ude00", 12 bytes): such a query is searched, and one
    character more is refused by the query limit, with its message, not by the body limit."""
    (service.workspace / "MEMORY.md").write_text("# MEMORY\nthe aardvark ledger\n")
    service.daemon.reconciler.all()
    main = {**_bearer(token_of(service.root, "main")), "Content-Type": "application/json"}
    longest = "aardvark " + "\N{GRINNING FACE}" * (MAX_QUERY_CHARS - 9)
    assert len(longest) == MAX_QUERY_CHARS

    def post(path: str, query: str):
        return api.post(path, content=json.dumps({"agent": "main", "q": query}).encode(), headers=main)

    searched = post("/v1/search", longest)
    assert searched.status_code == 200 and [h["path"] for h in searched.json()["results"]] == ["MEMORY.md"]
    # L4 is off in this service: past the body limit and the query limit, the broker says so
    assert post("/v1/memories/search", longest).status_code == 503
    for path in ("/v1/search", "/v1/memories/search"):
        refused = post(path, longest + "\N{GRINNING FACE}")
        assert refused.status_code == 413
        assert refused.json()["error"].startswith(f"the query is {MAX_QUERY_CHARS + 1:,} characters; the limit is")
