"""The protocol package travels with the skill: every installed copy equals the source, byte for byte.

mem0_client.py imports ``protocol`` (standard library only).  In a workspace it finds the copy that
daemon/common/skill.py installs beside it; this replaces the tests that compared the skill's copied
constants and request fields with the daemon's one by one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from daemon.common import skill

SOURCE = skill.CHECKOUT / "protocol"
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"


def _install(workspace: Path) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    skill.sync_skill(workspace, skill.Launcher("/usr/bin/python3", str(skill.CHECKOUT), None, "alpha"))
    return workspace / skill.SKILL_REL


def installed_copies(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / skill.PROTOCOL_DIR).glob("*.py"))}


def test_each_installed_copy_of_the_protocol_equals_the_source(tmp_path):
    source = {p.name: p.read_bytes() for p in sorted(SOURCE.glob("*.py"))}
    assert "client.py" in source and "operations.py" in source
    folder = _install(tmp_path / "alpha-workspace")
    assert installed_copies(folder) == source
    # a copy an agent edited is kept as a backup and refreshed to the source's
    edited = folder / skill.PROTOCOL_DIR / "limits.py"
    edited.write_text("MAX_QUERY_CHARS = 1\n")
    changes = skill.sync_skill(
        tmp_path / "alpha-workspace", skill.Launcher("/usr/bin/python3", str(skill.CHECKOUT), None, "alpha")
    )
    assert any("protocol/limits.py edited: kept as" in c for c in changes)
    assert installed_copies(folder) == source


def test_the_installed_skill_runs_on_its_own_copy_under_any_python3(tmp_path):
    folder = _install(tmp_path / "alpha-workspace")
    probe = "import mem0_client, protocol; print(protocol.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [PYTHON, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(folder)!r}); {probe}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).parent == folder / skill.PROTOCOL_DIR
    gone = subprocess.run(
        [PYTHON, "-I", "-S", str(folder / "mem0_client.py"), "status", "--socket", str(tmp_path / "none.sock")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert gone.returncode == 1 and "no daemon socket at" in gone.stderr and "Traceback" not in gone.stderr


def test_removing_the_skill_removes_its_protocol_copy(tmp_path):
    workspace = tmp_path / "alpha-workspace"
    folder = _install(workspace)
    assert (folder / skill.PROTOCOL_DIR).is_dir()
    skill.remove_skill(workspace)
    assert not (folder / skill.PROTOCOL_DIR).exists()
