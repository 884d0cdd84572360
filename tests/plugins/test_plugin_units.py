"""The plugin's own unit tests (plugins/openclaw-memory-memstrata/test/, Node's test runner) and one check
that its JavaScript finds the socket where protocol/locations.py does."""

from __future__ import annotations

import json
import subprocess

import pytest

from protocol.locations import find_socket
from tests.plugins.plugin_host import PLUGIN_DIR, node_argv


@pytest.fixture
def node() -> list[str]:
    """The Node that runs OpenClaw: skipped without the install, failed under ``make test``."""
    return node_argv()


def test_the_plugins_unit_tests_pass(node):
    run = subprocess.run(
        [*node, "--test", "test/unit.test.js"], cwd=PLUGIN_DIR, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout or "ℹ fail 0" in run.stdout


@pytest.mark.parametrize(
    "paths",
    [
        "",  # the defaults
        'paths:\n  root: .\n  socket: "{root}/memstrata/run/memstrata.sock"\n',
        "paths:\n  root: /srv/oc\n  workspace: '{root}/ws'\n  socket: run/s.sock  # relative: the file's directory\n",
        "version: 1\npaths:\n  socket: ~/m.sock\nwatch:\n  socket: /not/this.sock\n",
    ],
)
def test_the_socket_is_where_the_cli_finds_it(tmp_path, paths, node):
    config = tmp_path / "memstrata.yaml"
    config.write_text(paths)
    script = "import('./lib/locate.js').then(m => console.log(JSON.stringify(m.findSocket(process.argv[1], {}))))"
    run = subprocess.run(
        [*node, "--input-type=module", "-e", script, str(config)], cwd=PLUGIN_DIR, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["socket"] == str(find_socket(config=str(config)))
