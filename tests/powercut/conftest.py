"""One loop image per test module (making and syncing a root costs seconds): each test cuts it once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import LEAN
from tests.powercut.harness import PowerCutRoot, loop_devices_usable


@pytest.fixture(scope="module")
def files_root(tmp_path_factory) -> Iterator[PowerCutRoot]:
    """A root without L4 (notes, commits, restores): the files-and-git half of the cut tests."""
    if why := loop_devices_usable():
        pytest.skip(why)
    rig = PowerCutRoot(tmp_path_factory.mktemp("powercut-files"), LEAN, agents=("a",))
    try:
        rig.create()
        yield rig
    finally:
        rig.close()
