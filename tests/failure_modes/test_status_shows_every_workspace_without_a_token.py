"""``GET /v1/status`` needed no token and listed every agent's workspace and held-back files.

Before: any process that could reach the socket got every agent's workspace path and
each held-back file with its line and kind (``curl --unix-socket … /v1/status``).  Now:
without a token, daemon-level health and counts; with an agent's token, that agent's
entry only; with the administrator's token, everything.  ``memstrata status`` as root
(it reads the administrator's token) shows every agent as before; the skill's
``mem0_client.py status`` (an agent's own token) shows its own workspace only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import FAKE_API_KEY, FAST, REPO_ROOT, init_root, run_cli, wait_for

CLIENT = REPO_ROOT / "skills" / "mem0-integration" / "mem0_client.py"


def _token(workspace: Path) -> str:
    return (workspace / ".memstrata" / "token").read_text().strip()


def test_status_is_scoped_by_token(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    for agent in ("beta", "gamma"):
        run_cli("agent", "add", agent, config=config)
    agents = tmp_path / "workspace" / "agents"
    beta, gamma = agents / "beta-workspace", agents / "gamma-workspace"
    (gamma / "memory" / "2026-11-27.md").write_text(f"# keys\n\nthe key is {FAKE_API_KEY}\n")
    d = daemons(config)
    wait_for(lambda: d.agent("gamma")["held_back"], what="gamma's file held back")
    wait_for(lambda: d.status()["conversation"].get("reachable"), timeout=90, what="L4 open")

    full = d.status()  # the administrator's token
    assert full["access"] == "admin" and {a["id"] for a in full["agents"]} == {"main", "beta", "gamma"}

    for token in (None, "not-a-token"):
        anonymous = d.status(token=token)
        text = json.dumps(anonymous, ensure_ascii=False)
        assert "agents" not in anonymous and "2026-11-27.md" not in text and str(tmp_path) not in text
        assert anonymous["daemon"]["running"] is True
        counts = anonymous["counts"]
        assert (counts["agents"], counts["held_back"]) == (3, 1)
        assert counts["files"] == sum(a["files"] for a in full["agents"])
        assert anonymous["conversation"]["reachable"] is True and "url" not in anonymous["conversation"]
    assert "belongs to no agent" in d.status(token="not-a-token")["note"]

    own = d.status(token=_token(beta))
    text = json.dumps(own, ensure_ascii=False)
    assert own["access"] == "agent beta" and [a["id"] for a in own["agents"]] == ["beta"]
    assert "gamma" not in text and "2026-11-27.md" not in text and '"id": "main"' not in text
    assert "roots" not in own["watcher"] and "config" not in own["daemon"]
    gamma_own = d.status(token=_token(gamma))["agents"]
    assert gamma_own[0]["held_back"] == [{"path": "memory/2026-11-27.md", "line": 3, "kind": "api_key"}]

    # The CLI as root reads the administrator's token: every agent, as before.
    human = run_cli("status", config=config).stdout
    assert all(f"{a}  " in human for a in ("main", "beta", "gamma")) and "HELD BACK" in human
    # …and with an agent's token, that agent only; without any token, health and counts.
    as_beta = run_cli("status", config=config, env={"MEMSTRATA_TOKEN": _token(beta)}).stdout
    assert "beta  " in as_beta and "gamma" not in as_beta and "HELD BACK" not in as_beta

    # The skill, as an agent runs it from its workspace (its own token): its own entry only.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["MEMSTRATA_CONFIG"] = str(config)
    skill = subprocess.run(
        [sys.executable, str(CLIENT), "status", "--json"], cwd=beta, env=env, capture_output=True, text=True
    )
    assert skill.returncode == 0, skill.stderr
    answer = json.loads(skill.stdout)
    assert [a["id"] for a in answer["agents"]] == ["beta"] and "gamma" not in skill.stdout


def test_set_aside_writes_and_storage_problems_are_shown_to_their_owner_only():
    """Which writes were set aside, and where a disk refuses writes, name agents and paths."""
    from daemon.api.app import scoped_status

    snapshot = {
        "daemon": {"running": True, "summary": "2 agents", "socket": "/run/memstrata.sock"},
        "agents": [{"id": "beta", "files": 1}, {"id": "gamma", "files": 2}],
        "conversation": {
            "enabled": True,
            "queue": {
                "depth": 0,
                "set_aside": 2,
                "set_aside_recent": [
                    {"write_id": "w-beta", "agent_id": "beta", "reason": "bad date"},
                    {"write_id": "w-gamma", "agent_id": "gamma", "reason": "bad date"},
                ],
            },
        },
        "storage": {
            "ok": False,
            "problems": [
                {"place": "records", "agent": "gamma", "path": "/srv/gamma", "error": "No space", "failures": 3}
            ],
        },
    }
    nobody, beta, gamma = (scoped_status(snapshot, who) for who in (None, "beta", "gamma"))
    assert nobody["conversation"]["queue"]["set_aside_recent"] == []
    assert nobody["conversation"]["queue"]["set_aside"] == 2
    assert [w["write_id"] for w in beta["conversation"]["queue"]["set_aside_recent"]] == ["w-beta"]
    assert [w["write_id"] for w in gamma["conversation"]["queue"]["set_aside_recent"]] == ["w-gamma"]
    assert nobody["storage"]["problems"] == [{"place": "records", "since": None, "failures": 3, "retry_in_s": None}]
    assert "/srv/gamma" not in json.dumps(beta) and "/srv/gamma" in json.dumps(gamma)
    assert scoped_status(snapshot, "admin")["conversation"] == snapshot["conversation"]
