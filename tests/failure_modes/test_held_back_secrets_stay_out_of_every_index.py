"""A file held back from git because it holds a key used to be indexed: search returned the key.

Before: ``memstrata search`` found the held-back file and answered with the key, and the
raw bytes of ``index.sqlite`` held the key (lower-cased, as FTS5 tokens, and verbatim in
the chunk text).  Now the verdict is taken as each file is processed: a file with a
secret is never indexed, a file that gains one leaves the index, and text indexed
before a pattern knew it is scrubbed (secure_delete, FTS5 optimize, WAL truncated).

The proof greps the raw bytes of every file under the root the daemon writes (state
dir, index dirs, L4 queue and store, audit log, daemon log), while it runs with
vectors on and after it stopped, for each secret, lower-cased, and for its tail; git
must not hold the held-back secrets either, in any object.
"""

from __future__ import annotations

import json
import random
import signal
import string
import zlib
from pathlib import Path

import pytest
import yaml

from daemon.front.daemon_client import DaemonClient, DaemonRequestError
from tests.helpers import FAST, git, init_root, run_cli, wait_for

_RNG = random.Random(6)


def _secret(n: int = 40) -> str:
    alphabet = string.ascii_letters + string.digits
    while True:
        value = "".join(_RNG.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in value) and any(c.isupper() for c in value):
            return value


def _search(config: Path, query: str) -> list[dict]:
    out = run_cli("search", query, "--agent", "main", "--json", "--mode", "fts", config=config).stdout
    return json.loads(out)["results"]


def _needles(secret: str) -> list[bytes]:
    tail = secret[-12:]
    return sorted({s.encode() for s in (secret, secret.lower(), tail, tail.lower())})


def _files_holding(root: Path, needles: list[bytes], skip: set[Path]) -> list[str]:
    """Every file under ``root`` (but the workspace files that are the secrets' source) holding a needle."""
    found = []
    for path in sorted(root.rglob("*")):
        if path in skip or path.is_symlink() or not path.is_file() or ".git" in path.parts:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found += [f"{path.relative_to(root)}: {n.decode()!r}" for n in needles if n in data]
    return found


def _git_holds(workspace: Path, needles: list[bytes]) -> list[str]:
    """Loose objects (decompressed), packs and the index of the workspace's repository."""
    found = []
    gitdir = workspace / ".git"
    for path in gitdir.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if "objects" in path.parts and len(path.parent.name) == 2:
            data = zlib.decompress(data)
        found += [f"{path.relative_to(gitdir)}" for n in needles if n in data]
    history = git(workspace, "log", "--all", "-p").encode()
    found += ["git log -p" for n in needles if n in history]
    return found


def test_held_back_secrets_are_never_searchable_nor_stored(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"min_free_mb": 0})
    ws = tmp_path / "workspace"
    aws, token, codename = _secret(40), _secret(32), "PELICAN" + _secret(24).upper()
    d = daemons(config)

    # 1. a new file with a key: held back from git and never indexed
    (ws / "memory" / "2026-11-27.md").write_text(
        f"# rotation\n\nzebrafinch bucket keys\n\naws_secret_access_key = {aws}\n"
    )
    (ws / "memory" / "2026-11-26.md").write_text("# clean\n\nzebrafinch is the backup bucket\n")
    wait_for(lambda: d.agent("main")["held_back"], what="the file with the key is held back")
    wait_for(lambda: [r["path"] for r in _search(config, "zebrafinch")] == ["memory/2026-11-26.md"], what="indexed")
    assert _search(config, aws) == [] and _search(config, aws.lower()) == []

    # 2. an indexed file gains a secret: its chunks leave the index
    (ws / "memory" / "2026-11-28.md").write_text("# deploy\n\nkingfisher release notes\n")
    wait_for(lambda: _search(config, "kingfisher"), what="clean file searchable")
    with (ws / "memory" / "2026-11-28.md").open("a") as fh:
        fh.write(f"\nthe deploy token={token}\n")
    wait_for(lambda: _search(config, "kingfisher") == [], what="chunks of the file with a secret leave the index")
    assert _search(config, token) == []
    reasons = {n["path"]: n["reason"] for n in d.agent("main")["not_indexed"]}
    assert "secret" in reasons["memory/2026-11-28.md"] and "secret" in reasons["memory/2026-11-27.md"]

    # 3. text indexed (and embedded) before a pattern knew it is scrubbed once it does
    (ws / "memory" / "2026-11-29.md").write_text(f"# project\n\nthe launch codename is {codename}\n")
    wait_for(lambda: _search(config, codename), what="codename searchable while no pattern knows it")
    wait_for(lambda: d.agent("main")["index"]["pending_embeddings"] == 0, timeout=180, what="embedded")
    data = yaml.safe_load(config.read_text())
    data["guard"]["never_store"].append({"name": "codename", "pattern": "PELICAN[0-9A-Z]{24}"})
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    d.signal(signal.SIGHUP)
    wait_for(lambda: _search(config, codename) == [], what="the newly known secret leaves the index")

    # 4. an L4 write with the key is refused before it reaches the queue or the store
    agent_token = (ws / ".memstrata" / "token").read_text().strip()
    with DaemonClient(d.socket, token=agent_token) as client, pytest.raises(DaemonRequestError) as refused:
        client.add("main", f"remember aws_secret_access_key = {aws}")
    assert refused.value.status == 422

    sources = {ws / "memory" / f"2026-11-{day}.md" for day in (27, 28, 29)}
    needles = [n for s in (aws, token, codename) for n in _needles(s)]
    assert _files_holding(tmp_path, needles, sources) == [], "while running"
    assert d.stop() == 0
    assert _files_holding(tmp_path, needles, sources) == []
    held_needles = [n for s in (aws, token) for n in _needles(s)]
    assert _git_holds(ws, held_needles) == []
    assert "memory/2026-11-27.md" not in git(ws, "ls-files")
