"""The L4 routes over HTTP, in process: Starlette's TestClient over ``build_app`` on a daemon with L4 on.

The daemon is built on a real root (tests/daemon/conftest.py) with the broker over the embedded store
(Qdrant Edge files) and the stand-in embedder (tests/daemon/conversation_service.py); no socket, no
subprocess.  Agents: main, and beta, a spoke in project ``ops`` (main is not) who may write public
memories; the administrator's token acts for either.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import yaml
from starlette.testclient import TestClient

from daemon.api.app import build_app
from daemon.common.tokens import read_token
from tests.daemon.conftest import Service
from tests.daemon.conversation_service import enable, l4_service
from tests.helpers import registry_of, token_of
from tests.stand_in_embedder import StandInEmbedder

MEMORIES = "/v1/memories"


class Api:
    """The API over one daemon, and the tokens of main, beta and the administrator."""

    def __init__(self, service: Service, client: TestClient) -> None:
        self.service = service
        self.client = client
        self.tokens = {
            "main": token_of(service.root, "main"),
            "beta": token_of(service.root, "beta"),
            "admin": read_token(service.daemon.tokens.admin_path),
        }

    def call(self, who: str, method: str, path: str, **request):
        headers = {"Authorization": f"Bearer {self.tokens[who]}", **request.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **request)

    def add(self, who: str, agent: str, text: str, **fields):
        return self.call(who, "POST", MEMORIES, json={"agent": agent, "text": text, **fields})

    def added(self, who: str, agent: str, text: str, **fields) -> str:
        """The id of the one memory a write made (or found: ``EXISTS``, ``NOOP``)."""
        response = self.add(who, agent, text, **fields)
        assert response.status_code == 200, response.text
        [result] = response.json()["results"]
        return result["id"]

    def stored(self, memory_id: str) -> dict:
        """A memory as the store holds it, read past every rule and without counting as a use."""
        broker = self.service.daemon.broker
        memory = broker.thread.call("get", lambda: broker.store.get(memory_id))
        assert memory is not None, f"memory {memory_id} is gone"
        return memory

    def search(self, agent: str, query: str, **fields) -> list[str]:
        body = {"agent": agent, "q": query, "limit": 50, **fields}
        response = self.call(agent, "POST", f"{MEMORIES}/search", json=body)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["results"]]

    def listed(self, agent: str, filters: dict) -> list[str]:
        """The ids of ``agent``'s memories a filter lists (the filter as JSON text in the query string)."""
        import json

        params = {"agent": agent, "limit": 1000, "filters": json.dumps(filters)}
        response = self.call(agent, "GET", MEMORIES, params=params)
        assert response.status_code == 200, response.text
        return [m["id"] for m in response.json()["results"]]


def _with_project_ops(root: Path) -> None:
    """A project ``ops`` that beta is in and main is not; beta may write public memories."""
    registry = registry_of(root)
    data = yaml.safe_load(registry.read_text())
    data["projects"] = {"ops": {"description": "operations", "members": ["beta"], "keywords": []}}
    data["agents"]["beta"] = {"projects": ["ops"], "can_write_public": True}
    registry.write_text(yaml.safe_dump(data, sort_keys=False))


@contextlib.contextmanager
def l4_api(template: Path, root: Path) -> Iterator[Api]:
    """The API over a copy of ``template`` (a root ``memstrata init`` made) at ``root``, L4 reachable."""
    shutil.copytree(template, root, symlinks=True)
    _with_project_ops(root)
    config = root / "memstrata.yaml"
    embedder = StandInEmbedder()
    enable(config, embedder)
    try:
        with l4_service(config) as service:
            service.spoke_workspace()
            service.daemon.reconciler.all()  # beta is watched and has its token
            service.daemon.provision.ensure_admin_token()
            with TestClient(build_app(service.daemon), raise_server_exceptions=False) as client:
                yield Api(service, client)
    finally:
        embedder.close()
