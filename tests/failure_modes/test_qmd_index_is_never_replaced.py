"""QMD's own ``index.sqlite`` was memstrata's default L3 path, and ``reindex`` replaced it.

Before: ``paths.index`` defaulted to ``{root}/agents/{agent}/qmd/xdg-cache/qmd/index.sqlite``,
QMD's live index on an OpenClaw host.  The daemon opened it for writing (``PRAGMA
journal_mode=WAL``), found no ``meta`` table, called that "stale" and rebuilt: QMD's
``documents``/``content``/``documents_fts`` were renamed over by memstrata's schema.
Now: memstrata's index is a file of its own (``{root}/agents/{agent}/memstrata/index.sqlite``);
an index of ours at the old default moves there once; a configured path holding another
program's database (or any file memstrata did not create) is refused, named with its
tables, in the log, ``status`` and ``reindex`` (exit 1), and is never opened for writing,
while the other agents keep working.  A damaged index of ours is still rebuilt
(tests/daemon/service/test_daemon_index.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import apsw
import yaml

from layers.local.storage.index import Identity, LocalIndex
from tests.helpers import FAST, init_root, run_cli, wait_for

TABLES = "tables: content, documents, documents_fts"


def _qmd_index(path: Path) -> None:
    """A database shaped like QMD's (WAL, as QMD keeps it), closed cleanly: no -wal/-shm left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE documents(id INTEGER PRIMARY KEY, collection TEXT, path TEXT, hash TEXT);"
        "CREATE TABLE content(hash TEXT PRIMARY KEY, doc TEXT);"
        "CREATE VIRTUAL TABLE documents_fts USING fts5(path, body);"
        "INSERT INTO documents(collection, path, hash) VALUES('memory', 'MEMORY.md', 'abc');"
        "INSERT INTO content VALUES('abc', 'QMD keeps this');"
    )
    db.close()


def _fingerprint(path: Path) -> tuple:
    """Content, inode and mtime of the file, and what lies beside it (no -wal/-shm may appear)."""
    st = path.stat()
    beside = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_ino, st.st_mtime_ns, beside


def _search(config: Path, query: str, agent: str = "main") -> set[str]:
    out = json.loads(run_cli("search", query, "--agent", agent, "--json", config=config).stdout)
    return {r["path"] for r in out["results"]}


def test_qmd_index_at_the_old_default_is_left_alone(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    qmd = tmp_path / "agents" / "main" / "qmd" / "xdg-cache" / "qmd" / "index.sqlite"
    _qmd_index(qmd)
    before = _fingerprint(qmd)
    (tmp_path / "workspace" / "memory" / "2026-11-01.md").write_text("our own words: 自己的索引\n")

    d = daemons(config)
    wait_for(lambda: _search(config, "自己的索引") == {"memory/2026-11-01.md"}, what="indexed in a file of its own")
    run_cli("reindex", config=config)
    run_cli("reindex", "--rebuild", config=config)
    assert d.stop() == 0
    run_cli("reindex", "--rebuild", config=config)  # offline, too

    assert _fingerprint(qmd) == before, "QMD's index was written, replaced or got side files"
    ours = tmp_path / "agents" / "main" / "memstrata" / "index.sqlite"
    with LocalIndex(ours, Identity(), readonly=True) as index:
        assert "memory/2026-11-01.md" in index.documents()


def test_an_index_of_ours_at_the_old_default_moves_once(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    old = tmp_path / "agents" / "main" / "qmd" / "xdg-cache" / "qmd" / "index.sqlite"
    old.parent.mkdir(parents=True)
    LocalIndex(old, Identity()).close()  # what an earlier memstrata left at the old default
    created = dict(apsw.Connection(str(old)).execute("SELECT key, value FROM meta"))["created"]
    (tmp_path / "workspace" / "MEMORY.md").write_text("moved, not rebuilt: 搬家\n")

    d = daemons(config)
    wait_for(lambda: _search(config, "搬家") == {"MEMORY.md"})
    new = tmp_path / "agents" / "main" / "memstrata" / "index.sqlite"
    assert not old.exists() and new.exists()
    assert dict(apsw.Connection(str(new)).execute("SELECT key, value FROM meta"))["created"] == created
    assert "moved the memstrata index from" in d.log()
    assert d.stop() == 0


def test_a_configured_path_holding_a_foreign_file_is_refused_and_others_keep_working(tmp_path, daemons):
    config = init_root(tmp_path, **FAST, vectors={"backend": "off"})
    run_cli("agent", "add", "beta", config=config)
    run_cli("agent", "add", "gamma", config=config)
    data = yaml.safe_load(config.read_text())
    # main's index path is QMD's file, gamma's is a text file; beta's is free
    data["paths"]["index"] = "{root}/idx/{agent}.sqlite"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    qmd, text = tmp_path / "idx" / "main.sqlite", tmp_path / "idx" / "gamma.sqlite"
    _qmd_index(qmd)
    text.write_text("notes a person keeps here\n")
    before = _fingerprint(qmd), text.read_bytes()
    beta = tmp_path / "workspace" / "agents" / "beta-workspace"
    (beta / "MEMORY.md").write_text("beta is indexed: 照常工作\n")

    d = daemons(config)
    wait_for(lambda: _search(config, "照常工作", "beta") == {"MEMORY.md"}, what="beta indexed")
    main_index = d.agent("main")["index"]
    assert main_index["state"] == "refused"
    assert str(qmd) in main_index["error"] and TABLES in main_index["error"]
    assert "not an SQLite database" in d.agent("gamma")["index"]["error"]
    log = d.log()
    assert f"main: L3 index refused, this agent is not indexed: {qmd}" in log and TABLES in log
    assert log.count("main: L3 index refused") == 1, "said once, not at every reconcile"

    shown = " ".join(run_cli("status", config=config).stdout.split())  # a line past 100 columns goes on below
    assert f"index error: {qmd} is not a memstrata index" in shown and " ".join(TABLES.split()) in shown
    for args in (("reindex",), ("reindex", "--rebuild"), ("reindex", "--agent", "main")):
        proc = run_cli(*args, config=config, check=False)
        assert proc.returncode == 1 and f"main: NOT INDEXED: {qmd}" in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert "beta: " in run_cli("reindex", "--agent", "beta", config=config).stdout
    searched = run_cli("search", "x", "--agent", "main", config=config, check=False)
    assert searched.returncode == 1 and "refused" in searched.stderr and TABLES in searched.stderr
    assert d.stop() == 0

    offline = run_cli("reindex", config=config, check=False)  # the daemon down: the same refusal
    assert offline.returncode == 1 and f"main: NOT INDEXED: {qmd}" in offline.stderr
    assert TABLES in " ".join(run_cli("status", config=config, check=False).stdout.split())
    assert (_fingerprint(qmd), text.read_bytes()) == before, "a foreign file was written"

    qmd.unlink()  # the operator moved QMD's file away: the next start indexes main
    d = daemons(config)
    wait_for(lambda: d.agent("main")["index"]["state"] == "ready", what="main indexed once the path is free")
    assert d.stop() == 0
