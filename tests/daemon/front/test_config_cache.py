"""The front's validated-configuration cache (daemon/common/config_cache.py): fast, never stale, never planted.

In-process CLI calls (click's CliRunner) with the daemon down: ``memstrata status``
connects with the paths the cache gives (its "no daemon socket at …" names the
socket it tried), then reads the layers with the fully validated configuration.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from daemon.common import config_cache
from daemon.front.cli import main
from daemon.front.options import front_config
from layers.common.yamlfile import YamlFileError


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MEMSTRATA_CONFIG", raising=False)
    result = CliRunner().invoke(main, ["init", "--root", str(tmp_path / "root")])
    assert result.exit_code == 0, result.output
    return tmp_path / "root"


def _status(config: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--config", str(config), "status", "--json"])
    return result.exit_code, result.output


def _set_socket(config: Path, socket: str) -> None:
    text = config.read_text()
    assert "socket: " in text
    lines = [f"  socket: {socket}" if line.strip().startswith("socket:") else line for line in text.splitlines()]
    config.write_text("\n".join(lines) + "\n")


def _entries(root: Path) -> list[Path]:
    return sorted((root.parent / "cache" / "memstrata").glob("config-*.json"))


def test_a_changed_config_is_seen_by_the_next_call(root):
    config = root / "memstrata.yaml"
    code, out = _status(config)
    assert code == 3 and f"no daemon socket at {root / 'run' / 'memstrata.sock'}" in out
    (entry,) = _entries(root)
    assert entry.stat().st_mode & 0o777 == 0o600 and entry.parent.stat().st_mode & 0o777 == 0o700
    code, out = _status(config)  # from the cache: the same answer
    assert code == 3 and f"no daemon socket at {root / 'run' / 'memstrata.sock'}" in out
    _set_socket(config, "elsewhere/other.sock")
    code, out = _status(config)
    assert code == 3 and f"no daemon socket at {root / 'elsewhere' / 'other.sock'}" in out


def test_a_broken_config_after_a_good_one_is_never_served_silently(root):
    """A file that no longer validates is validated again and its error said, file, key and line, on every
    call. A call that only needs the paths (search, note, a status of a running daemon) then answers from
    the file's last good version, the running daemon's (issue 44); one that needs the whole configuration
    (status with the daemon down surveys the layers) fails with the error, as before."""
    config = root / "memstrata.yaml"
    assert _status(config)[0] == 3
    assert _entries(root)
    text = config.read_text()
    line = len(text.splitlines()) + 1
    config.write_text(text + "colour: red\n")
    said = f"{config}: colour (line {line}): unknown key"
    status = CliRunner().invoke(main, ["--config", str(config), "status"])
    assert status.exit_code == 1 and said in status.output, status.output
    search = CliRunner().invoke(main, ["--config", str(config), "search", "port", "--agent", "main", "--mode", "fts"])
    assert said in search.output and "last good version" in search.output, search.output
    assert "no index for main" in search.output, "answered from the last good paths (the daemon is down)"
    with click.Context(main, obj={"config_path": config}) as ctx:
        assert isinstance(front_config(ctx), config_cache.FrontConfig)
    # Another user's or another code's entry is no last good version: the error stands.
    for entry in _entries(root):
        data = json.loads(entry.read_text())
        data["context"] = "0" * 64
        entry.write_text(json.dumps(data))
    with click.Context(main, obj={"config_path": config}) as ctx, pytest.raises(YamlFileError, match="colour"):
        front_config(ctx)


def test_an_entry_that_fails_a_check_is_ignored_and_rebuilt(root):
    config = root / "memstrata.yaml"
    assert _status(config)[0] == 3
    (entry,) = _entries(root)
    data = json.loads(entry.read_text())
    data["paths"]["socket"] = "/planted.sock"
    entry.write_text(json.dumps(data))
    os.chmod(entry, 0o644)  # readable by others: not a private entry (as one planted by another user)
    code, out = _status(config)
    assert code == 3 and "/planted.sock" not in out and str(root / "run" / "memstrata.sock") in out
    assert entry.stat().st_mode & 0o777 == 0o600  # rewritten by the full validation
    data = json.loads(entry.read_text())
    data["key"] = "0" * 64  # made for other bytes, path, environment or code
    data["paths"]["socket"] = "/planted.sock"
    entry.write_text(json.dumps(data))
    code, out = _status(config)
    assert code == 3 and "/planted.sock" not in out


def test_a_shared_cache_directory_is_not_used(root):
    config = root / "memstrata.yaml"
    assert _status(config)[0] == 3
    (entry,) = _entries(root)
    os.chmod(entry.parent, 0o777)
    raw = config_cache.read_config_bytes(config)
    assert raw is not None and config_cache.load(raw) is None
    config_cache.store(raw, config_cache.Paths(*(Path("/x"),) * 3, "/x/{agent}", *(Path("/x"),) * 4))
    assert json.loads(entry.read_text())["paths"]["socket"] != "/x"  # nothing written into it either
