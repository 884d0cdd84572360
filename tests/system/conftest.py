"""One booted container per test module (booting is cheap, the rootfs build is cached); a fleet of
three booted hosts for the modules that ask for one (tests/system/fleet.py)."""

from __future__ import annotations

import re

import pytest

from tests.system.container import Container
from tests.system.fleet import Fleet
from tests.system.rootfs import ensure_rootfs


@pytest.fixture(scope="module")
def container(request, tmp_path_factory):
    """A freshly booted Debian with systemd, this checkout bound in; powered off after the module."""
    rootfs = ensure_rootfs()
    name = re.sub(r"[^a-z0-9-]", "-", request.module.__name__.rsplit(".", 1)[-1].lower())[:60].strip("-")
    log = tmp_path_factory.mktemp("nspawn") / "console.log"
    with Container(rootfs, log, name=name) as booted:
        yield booted


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Hub, spoke-1 and spoke-2 booted for the module, each with a disk and an address of its own;
    powered off and removed after it (namespaces and mounts too), whatever the tests did."""
    rootfs = ensure_rootfs()
    with Fleet(rootfs, tmp_path_factory.mktemp("fleet")) as booted:
        yield booted
