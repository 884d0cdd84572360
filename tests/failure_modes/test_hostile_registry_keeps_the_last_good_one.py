"""A hostile project registry (the main agent can write it): the last good one stays in force.

Before the fix every L4 request re-read a changed registry; an alias bomb there
hung the request in the duplicate-key walk, and the next request started the
same walk again, so every L4 request hung.  Here each hostile version is written
under a real daemon: requests keep answering with the last good membership, the
file is parsed once per change (one error line per version, however many
requests), status names file and line, and SIGTERM still ends the daemon.
"""

from __future__ import annotations

import re

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient
from tests.failure_modes.hostile_yaml import HOSTILE, restore
from tests.helpers import FAST, init_root, registry_of, run_cli, token_of, wait_for

pytestmark = pytest.mark.slow

REQUESTS_PER_VERSION = 4


def test_hostile_registry_keeps_the_last_good_one(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "a", "--project", "infra", config=config)
    run_cli("agent", "add", "b", config=config)
    registry = registry_of(tmp_path)
    good = registry.read_text()
    daemon = daemons(config)
    admin = (tmp_path / "state" / "admin.token").read_text().strip()

    def status() -> dict:
        with DaemonClient(daemon.socket, timeout=10, token=admin) as client:
            return client.status()

    wait_for(lambda: status()["conversation"]["reachable"], timeout=120, what="L4 reachable")

    with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "a")) as a:
        for name, (write, says) in HOSTILE.items():
            write(registry, good)
            assert says in status()["conversation"]["registry_error"], name  # shown before any request
            for i in range(REQUESTS_PER_VERSION):  # each answers, with a's membership of infra still known
                added = a.add("a", f"infra note {i} while the registry is {name}", project="infra")
                assert added["project_id"] == "infra", (name, added)
                found = a.memory_search("a", f"infra note {i} {name}")
                assert found["degraded"] is False, (name, found)
            error = status()["conversation"]["registry_error"]
            assert str(registry) in error and says in error and "previous registry stays in force" in error
            if name not in ("a FIFO", "oversized"):
                assert re.search(r"\(line \d+\)", error), error
            # Parsed once per change of the file, not once per request.
            assert daemon.log().count(says) == 1, (name, daemon.log())
            restore(registry, good)

        # A good edit takes effect: b joins infra and now reads a's project memories.
        data = yaml.safe_load(good)
        data["agents"]["b"]["projects"] = ["infra"]
        registry.write_text(yaml.safe_dump(data))
        with DaemonClient(daemon.socket, timeout=60, token=token_of(tmp_path, "b")) as b:
            wait_for(
                lambda: any("infra note" in r["memory"] for r in b.memory_search("b", "infra note")["results"]),
                timeout=30,
                what="the good registry in force",
            )
        assert status()["conversation"]["registry_error"] == ""

    assert daemon.stop(timeout=15) == 0, daemon.log()
