"""What a refused request carried is cut short, never holds a secret, and repeats are one line.

Before the fix a refused add echoed its values in the error and wrote them to
the audit log uncut: a 5 MB ``project`` made a 5 MB answer and added 10 MB to
the audit log per request (measured: 10,485,937 bytes), an API key sent as
``project`` came back in the error and was written to the audit log as it was,
and 100 identical refusals were 100 lines.  Now every field is checked against
its schema first (a 100,000-character project is a 400 naming the field, the
value never quoted), what is echoed or audited is cut to a few dozen characters
and passed through never_store, and identical refusals within a minute are one
line plus one ``"repeated": N`` line.
"""

from __future__ import annotations

import json

import httpx
import pytest

from daemon.common.daemon_limits import MAX_ECHO_CHARS
from tests.helpers import FAKE_API_KEY, init_root, run_cli, token_of, wait_reachable

pytestmark = pytest.mark.slow


def _audit(root) -> list[dict]:
    lines = []
    for path in sorted((root / "workspace" / "logs" / "security").glob("memory-access-*.log")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def _audit_bytes(root) -> int:
    return sum(p.stat().st_size for p in (root / "workspace" / "logs" / "security").glob("memory-access-*.log"))


def test_refused_values_are_cut_redacted_and_folded(tmp_path, daemons):
    config = init_root(tmp_path, vectors={"backend": "off"})
    run_cli("agent", "add", "alpha", config=config)
    run_cli("agent", "add", "beta", config=config)
    daemon = daemons(config)
    wait_reachable(daemon)
    http = httpx.Client(
        transport=httpx.HTTPTransport(uds=str(daemon.socket)),
        base_url="http://memstrata",
        timeout=60,
        headers={"Authorization": f"Bearer {token_of(tmp_path, 'alpha')}"},
    )

    # A huge value: a 400 that names the field and its length, quotes nothing, audits nothing.
    before = _audit_bytes(tmp_path)
    for field in ("project", "type", "visibility", "expires", "write_id", "role"):
        answer = http.post("/v1/memories", json={"agent": "alpha", "text": "a note", field: "p" * 100_000})
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]
        assert message.startswith(f"{field} ") or message.startswith(f"{field}:"), message
        assert "ppppp" not in message and len(answer.content) < 1000, message
    assert _audit_bytes(tmp_path) == before

    # A value that is a well-formed id reaches the policy: the refusal is audited, the key never.
    key = FAKE_API_KEY.lower()
    answer = http.post("/v1/memories", json={"agent": "alpha", "text": "a note", "project": key})
    assert answer.status_code == 403 and "not a member" in answer.json()["error"], answer.text
    assert key not in answer.text and "[redacted" in answer.text
    denied = [e for e in _audit(tmp_path) if e["event"] == "write_denied"]
    assert denied and key not in json.dumps(denied) and "[redacted" in denied[-1]["project"], denied

    # A long value the daemon quotes back (a memory id in the path) is cut, saying how long it was.
    long_id = "m" * 5000
    answer = http.get(f"/v1/memories/{long_id}", params={"agent": "alpha"})
    assert answer.status_code == 404 and len(answer.json()["error"]) < MAX_ECHO_CHARS * 10, answer.text

    # Another agent's name in the request: audited once, repeats folded into a count.
    beta_answers = [http.post("/v1/search", json={"agent": "beta", "q": "x"}).status_code for _ in range(50)]
    assert set(beta_answers) == {403}
    impersonations = [e for e in _audit(tmp_path) if e["event"] == "impersonation_denied"]
    assert len(impersonations) == 1, impersonations
    http.close()

    assert daemon.stop() == 0  # the stop writes what was folded
    impersonations = [e for e in _audit(tmp_path) if e["event"] == "impersonation_denied"]
    assert len(impersonations) == 2 and impersonations[1]["repeated"] == 49, impersonations
    assert impersonations[1]["since"] == impersonations[0]["time"]
