"""A file name that is not UTF-8 (``memory/bad\\xffname.md``) costs nobody else anything.

Before the fix that one name made ``GET /v1/status`` fail for every agent (HTTP
400, "surrogates not allowed"), ``memstrata status`` printed a traceback, and the
file was never indexed.  Now it is versioned under its real bytes, indexed and
found, shown escaped (``bad\\xffname.md``) in status text, JSON and search
results, and the other files and agents are untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from daemon.front.daemon_client import DaemonClient
from tests.helpers import FAST, init_root, run_cli, wait_for

pytestmark = pytest.mark.slow

BAD = b"memory/bad\xffname.md"
SHOWN = "memory/bad\\xffname.md"  # how every answer spells it: the byte as \xff, plain ASCII


def tracked(workspace) -> list[bytes]:
    out = subprocess.run(["git", "-C", str(workspace), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.split(b"\0") if p]


def test_non_utf8_file_name_affects_only_itself(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"}, conversation={"enabled": False})
    run_cli("agent", "add", "b", config=config)
    main_ws = tmp_path / "workspace"
    b_ws = main_ws / "agents" / "b-workspace"
    daemon = daemons(config)
    admin = (tmp_path / "state" / "admin.token").read_text().strip()
    b_token = (b_ws / ".memstrata" / "token").read_text().strip()

    def client(token: str = admin) -> DaemonClient:
        return DaemonClient(daemon.socket, timeout=30, token=token)

    bad_path = os.path.join(os.fsencode(main_ws), BAD)
    with open(bad_path, "wb") as fh:
        fh.write(b"# odd name\n\nthe quokka ledger lives here\n")
    (main_ws / "memory" / "2026-11-30.md").write_text("the wombat ledger lives here\n")
    (b_ws / "memory" / "2026-11-30.md").write_text("b keeps the numbat ledger\n")

    # Versioned under its real bytes, beside the other files.
    wait_for(lambda: BAD in tracked(main_ws), what=f"the bad name committed\n{daemon.log()}")
    wait_for(lambda: b"memory/2026-11-30.md" in tracked(main_ws), what="main's other file committed")
    wait_for(lambda: b"memory/2026-11-30.md" in tracked(b_ws), what="b's file committed")
    subjects = subprocess.run(["git", "-C", str(main_ws), "log", "--format=%s"], capture_output=True).stdout
    assert SHOWN.encode() in subjects, "the commit message names it escaped (valid UTF-8)"

    # Indexed and found, under its shown name; the other files too.
    with client() as c:
        found = wait_for(lambda: c.search("main", "quokka")["results"], what="the bad name indexed")
        assert [r["path"] for r in found] == [SHOWN]
        assert [r["path"] for r in c.search("main", "wombat")["results"]] == ["memory/2026-11-30.md"]
        status = c.status()  # HTTP 200, not 400
    main = next(a for a in status["agents"] if a["id"] == "main")
    assert SHOWN in main["naming_violations"]
    assert not main["skipped"] and not main["not_indexed"], main
    with client(b_token) as b:
        assert b.status()["daemon"]["running"]
        assert [r["path"] for r in b.search("b", "numbat")["results"]] == ["memory/2026-11-30.md"]

    # The CLI: status (text and JSON) and search, no traceback.
    text = run_cli("status", config=config)
    assert SHOWN in text.stdout and "Traceback" not in text.stderr
    as_json = json.loads(run_cli("status", "--json", config=config).stdout)
    assert SHOWN in next(a for a in as_json["agents"] if a["id"] == "main")["naming_violations"]
    assert SHOWN in run_cli("search", "quokka", "--agent", "main", config=config).stdout

    # Removing it works like any other file: out of the index, deletion committed.
    os.unlink(bad_path)
    wait_for(lambda: BAD not in tracked(main_ws), what="the deletion committed")
    with client() as c:
        wait_for(lambda: not c.search("main", "quokka")["results"], what="out of the index")

    with open(bad_path, "wb") as fh:
        fh.write(b"the quokka is back\n")
    wait_for(lambda: BAD in tracked(main_ws), what="committed again")
    daemon.signal(signal.SIGTERM)
    assert daemon.stop(timeout=15) == 0, daemon.log()

    # With the daemon down, status reads disk and git: the same escaped name, exit 3, no traceback.
    offline = run_cli("status", config=config, check=False)
    assert offline.returncode == 3 and "Traceback" not in offline.stderr, offline.stderr
    assert SHOWN in offline.stdout
    offline_json = json.loads(run_cli("status", "--json", config=config, check=False).stdout)
    assert SHOWN in next(a for a in offline_json["agents"] if a["id"] == "main")["naming_violations"]
    assert SHOWN in run_cli("search", "quokka", "--agent", "main", config=config).stdout  # offline index read
