import atexit
import os
import shutil
import tempfile

import pytest

from tests.helpers import DaemonProcess

# Tests never reach a network service; mem0 must not phone home if anything imports it.
os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Commits made by tests "as a person" need an identity on a fresh machine.
for key, value in {
    "GIT_AUTHOR_NAME": "Test Person",
    "GIT_AUTHOR_EMAIL": "person@example.invalid",
    "GIT_COMMITTER_NAME": "Test Person",
    "GIT_COMMITTER_EMAIL": "person@example.invalid",
}.items():
    os.environ.setdefault(key, value)
# The front's validated-configuration cache (daemon/common/config_cache.py) of the CLI calls tests make:
# one directory per run, removed at exit, instead of entries for every temporary config in ~/.cache.
_CONFIG_CACHE = tempfile.mkdtemp(prefix="memstrata-test-cache-")
os.environ.setdefault("XDG_CACHE_HOME", _CONFIG_CACHE)
atexit.register(shutil.rmtree, _CONFIG_CACHE, True)


@pytest.fixture
def daemons():
    """Start daemons through this list; every one still running is stopped at the end."""
    started: list[DaemonProcess] = []

    def start(config, env=None, wait=True) -> DaemonProcess:
        d = DaemonProcess(config, env).start(wait=wait)
        started.append(d)
        return d

    yield start
    for d in started:
        if d.proc and d.proc.poll() is None:
            d.stop()
