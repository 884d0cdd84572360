"""``memstrata get ID --agent beta`` run as root showed alpha's private memory; ``delete`` deleted it.

Before: the CLI presents the administrator's token when it can read it (root can), and the daemon
let that token read and change any memory by id, whatever ``--agent`` said, although both
``--help`` texts say an agent never reads or deletes another's private memory.  The audit log
then recorded the delete as ``"agent": "beta"``, as if beta had done it.  With beta's own token
both were refused.  Now ``--agent X`` means "as X" for every L4 command, with the administrator's
token too: X's visibility and X's ownership, the very answer X's own token gets (an unknown id and
another's private one read alike), and the audit log names the real actor, ``admin as X``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FAST, init_root, run_cli, token_of, wait_reachable
from tests.stand_in_embedder import StandInEmbedder

pytestmark = pytest.mark.slow

SECRET_PLAN = "alpha keeps the rollback plan for the billing cutover in room 4"
UNKNOWN = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def cluster(tmp_path, daemons):
    embedder = StandInEmbedder()
    config = init_root(tmp_path, **FAST)
    env = embedder.configure(config)
    for agent in ("alpha", "beta"):
        run_cli("agent", "add", agent, config=config)
    daemon = daemons(config, env=env)
    wait_reachable(daemon)
    yield tmp_path, config, env, daemon
    embedder.close()


def _as_root(config: Path, env: dict, *args: str):
    """The CLI as the operator runs it: no $MEMSTRATA_TOKEN, so the administrator's token is presented."""
    assert "MEMSTRATA_TOKEN" not in env
    return run_cli(*args, config=config, env=env, check=False)


def _audit(root: Path) -> list[dict]:
    lines = []
    for log in sorted((root / "workspace" / "logs" / "security").glob("memory-access-*.log")):
        lines += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return lines


def _same_refusal(theirs, unknown, memory_id: str) -> None:
    """What X is told about another's private memory is what it is told about no memory at all."""
    assert theirs.returncode == unknown.returncode != 0, (theirs.stdout, theirs.stderr)
    assert theirs.stdout.replace(memory_id, "ID") == unknown.stdout.replace(UNKNOWN, "ID")
    assert theirs.stderr.replace(memory_id, "ID") == unknown.stderr.replace(UNKNOWN, "ID")
    assert SECRET_PLAN not in theirs.stdout + theirs.stderr


def test_agent_option_as_root_acts_as_that_agent(cluster):
    root, config, env, _daemon = cluster
    alpha_env = {**env, "MEMSTRATA_TOKEN": token_of(root, "alpha")}
    added = json.loads(run_cli("add", SECRET_PLAN, "--agent", "alpha", "--json", config=config, env=alpha_env).stdout)
    assert added["visibility"] == "private" and not added["queued"], added
    memory_id = added["results"][0]["id"]

    # Every L4 command by id, as root with --agent beta: beta's answer, the one for an unknown id.
    for command in (
        ("get", "{id}"),
        ("delete", "{id}"),
        ("update", "{id}", "beta rewrites it"),
        ("restore-memory", "{id}"),
        ("history", "--memory", "{id}"),
        ("add", "beta's version of the plan", "--supersedes", "{id}"),
    ):
        for json_flag in ((), ("--json",)):
            theirs = _as_root(config, env, *(a.format(id=memory_id) for a in command), "--agent", "beta", *json_flag)
            unknown = _as_root(config, env, *(a.format(id=UNKNOWN) for a in command), "--agent", "beta", *json_flag)
            _same_refusal(theirs, unknown, memory_id)

    # Nor does any listing or search as beta show it.
    listed = _as_root(config, env, "list", "--agent", "beta", "--json")
    assert listed.returncode == 0 and SECRET_PLAN not in listed.stdout, listed.stdout
    query = "rollback plan billing cutover"
    found = _as_root(config, env, "search", query, "--agent", "beta", "--layer", "conversation")
    assert found.returncode == 0 and SECRET_PLAN not in found.stdout, found.stdout

    # Untouched: alpha still reads it, with its single ADD.
    mine = json.loads(run_cli("get", memory_id, "--agent", "alpha", "--json", config=config, env=alpha_env).stdout)
    assert mine["memory"] == SECRET_PLAN
    events = json.loads(
        run_cli("history", "--memory", memory_id, "--agent", "alpha", "--json", config=config, env=alpha_env).stdout
    )
    assert [e["event"] for e in events["results"]] == ["ADD"]

    # The refusals are audited under the real actor.
    denied = [e for e in _audit(root) if e.get("memory_id") == memory_id and e["event"].endswith("_denied")]
    assert {e["event"] for e in denied} >= {"read_denied", "delete_denied", "update_denied", "history_denied"}
    assert all(e["agent"] == "beta" and e["actor"] == "admin as beta" for e in denied), denied

    # As alpha (the owner), root may: and the audit says the operator did it, as alpha.
    shown = _as_root(config, env, "get", memory_id, "--agent", "alpha")
    assert shown.returncode == 0 and SECRET_PLAN in shown.stdout
    gone = _as_root(config, env, "delete", memory_id, "--agent", "alpha", "--json")
    assert gone.returncode == 0 and json.loads(gone.stdout) == {"deleted": memory_id}
    deleted = [e for e in _audit(root) if e["event"] == "memory_deleted" and e.get("memory_id") == memory_id]
    assert [(e["agent"], e["owner"], e["actor"]) for e in deleted] == [("alpha", "alpha", "admin as alpha")]


def test_an_agents_own_token_is_audited_as_itself(cluster):
    root, config, env, _daemon = cluster
    alpha_env = {**env, "MEMSTRATA_TOKEN": token_of(root, "alpha")}
    beta_env = {**env, "MEMSTRATA_TOKEN": token_of(root, "beta")}
    added = json.loads(run_cli("add", SECRET_PLAN, "--agent", "alpha", "--json", config=config, env=alpha_env).stdout)
    memory_id = added["results"][0]["id"]
    refused = run_cli("get", memory_id, "--agent", "beta", config=config, env=beta_env, check=False)
    as_root = _as_root(config, env, "get", memory_id, "--agent", "beta")
    assert refused.returncode == as_root.returncode == 1
    assert refused.stderr == as_root.stderr, "the operator as beta is told what beta is told"
    denied = [e for e in _audit(root) if e["event"] == "read_denied" and e.get("memory_id") == memory_id]
    assert [e["actor"] for e in denied] == ["beta", "admin as beta"]


def test_an_unknown_agent_is_refused_to_the_administrator(cluster):
    _root, config, env, _daemon = cluster
    unknown = _as_root(config, env, "get", UNKNOWN, "--agent", "nobody")
    assert unknown.returncode == 2 and "nobody" in unknown.stderr
