"""A memory's lifecycle through the CLI and the real daemon: every field in ``--json``, trust by who writes.

Run as root, the CLI carries the administrator's token (the operator: trust high); with an agent's
token in ``$MEMSTRATA_TOKEN`` it is that agent (trust medium, never more).
"""

from __future__ import annotations

import json

from tests.daemon.conversation.test_conversation import cluster  # noqa: F401  (the fixture: agents a, b, c and a daemon)
from tests.helpers import run_cli, token_of

FIELDS = {
    "valid_from",
    "invalid_at",
    "superseded_by",
    "state",
    "archived",
    "restored_at",
    "access_count",
    "last_accessed",
    "importance",
    "trust",
    "provenance",
}


def test_supersede_trust_and_restore_from_the_command_line(cluster):  # noqa: F811
    config = cluster.root / "memstrata.yaml"
    as_a = {"MEMSTRATA_TOKEN": token_of(cluster.root, "a")}

    def cli(*args: str, env: dict | None = None, check: bool = True):
        return run_cli(*args, "--agent", "a", config=config, env=env, check=check)

    def as_json(*args: str, env: dict | None = None):
        return json.loads(cli(*args, "--json", env=env).stdout)

    by_operator = as_json("add", "the build server is ci-01", "--type", "procedure")
    assert (by_operator["trust"], by_operator["provenance"]) == ("high", "operator")
    old = by_operator["results"][0]["id"]
    replaced = as_json("add", "the build server moved to ci-02", "--type", "procedure", "--supersedes", old, env=as_a)
    new = replaced["results"][0]["id"]
    assert replaced["superseded"] is True and (replaced["trust"], replaced["provenance"]) == ("medium", "agent_output")
    listed = as_json("list")["results"]
    assert [r["id"] for r in listed] == [new] and set(listed[0]) >= FIELDS
    assert {r["id"] for r in as_json("list", "--show-superseded")["results"]} == {old, new}
    gone = as_json("get", old)
    assert (gone["state"], gone["superseded_by"], gone["trust"]) == ("superseded", new, "high")
    history = as_json("history", "--memory", new)
    assert [step["id"] for step in history["chain"]] == [old, new]
    assert "validity (what replaced what" in cli("history", "--memory", new).stdout

    found = as_json("search", "build server", "--layer", "conversation", "--show-superseded")["results"]
    assert {r["id"] for r in found} == {old, new} and all(set(r) >= FIELDS for r in found)
    trusted = as_json("search", "build server", "--layer", "conversation", "--trust-min", "high")["results"]
    assert trusted == [], "the operator's memory was superseded; the valid one is an agent's (medium)"
    shown = cli("search", "build server", "--layer", "conversation").stdout
    assert "trust medium" in shown and "ci-02" in shown

    refused = cli("add", "the build server is fine, trust me", "--trust", "high", env=as_a, check=False)
    assert refused.returncode == 1 and "at most medium" in refused.stderr

    restored = as_json("restore-memory", old, env=as_a)
    assert (restored["restored"], restored["previous_state"], restored["state"]) == (True, "superseded", "valid")
    assert "valid already" in cli("restore-memory", old, env=as_a).stdout

    report = json.loads(run_cli("cleanup", "--dry-run", "--json", config=config).stdout)
    assert {"archived", "kept_in_chain"} <= set(report) and "archived" in report["by_type"]["procedure"]
