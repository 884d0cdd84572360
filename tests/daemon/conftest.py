"""An in-process service for the tests of its parts: the real parts on a real root, nothing started.

``MemoryDaemon`` is built on a root ``memstrata init`` made (real git, real apsw
indexes, real files); its parts are driven directly (a loop turn, a reconcile,
a reload) instead of through a daemon subprocess, so a failure names the part.
No API socket, watcher or worker thread is started; the state lock is taken as
`memstrata reindex` takes it.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from daemon.common.config import load_config
from tests.helpers import LEAN, init_root

if TYPE_CHECKING:
    from daemon.service.notify import Notifier


class Service:
    """A root and the daemon built on it; ``reload_from`` rewrites the config the daemon reads."""

    def __init__(self, root: Path, config_path: Path, notifier: Notifier | None = None) -> None:
        from daemon.service.memory_daemon import MemoryDaemon

        self.root = root
        self.config_path = config_path
        self.workspace = root / "workspace"
        self.daemon = MemoryDaemon(load_config(config_path), notifier)

    def open(self) -> Service:
        d = self.daemon
        d._acquire_state_lock("tests")
        self.daemon.config.paths.agents_dir.mkdir(parents=True, exist_ok=True)
        d.reconciler.all()  # adds every agent found, as start() does
        return self

    def spoke_workspace(self, memory: str = "# beta\n", name: str = "beta") -> Path:
        """A spoke agent's workspace with its MEMORY.md, not yet seen by the daemon."""
        workspace = self.daemon.config.paths.agents_dir / f"{name}-workspace"
        workspace.mkdir()
        (workspace / "MEMORY.md").write_text(memory)
        return workspace

    @contextlib.contextmanager
    def loop_running(self) -> Iterator[None]:
        """A stand-in for the loop thread meanwhile: it runs what API threads hand the loop (a reindex)."""
        done = threading.Event()

        def loop() -> None:
            while not done.is_set():
                self.daemon.jobs.run_pending()
                done.wait(0.02)

        thread = threading.Thread(target=loop)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(5)

    def close(self) -> None:
        self.daemon.indexer.close()
        self.daemon.release()


@pytest.fixture(scope="session")
def _service_template(tmp_path_factory) -> Path:
    """One `memstrata init` per session (a CLI start is the costly part); each test copies it."""
    root = tmp_path_factory.mktemp("service-template")
    init_root(root, **LEAN)
    return root


@pytest.fixture
def service_root(tmp_path, _service_template) -> Path:
    """A fresh root with the LEAN settings (no vectors, no L4): its config file's path.

    The config's paths are relative to the file, so a copy is a root of its own.
    """
    root = tmp_path / "root"
    shutil.copytree(_service_template, root, symlinks=True)
    return root / "memstrata.yaml"


@pytest.fixture
def service(service_root):
    s = Service(service_root.parent, service_root).open()
    yield s
    s.close()
