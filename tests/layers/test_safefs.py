"""layers.common.safefs: writes inside a directory someone else controls, with real symlinks and hard links."""

from __future__ import annotations

import os

import pytest

from layers.common import safefs


@pytest.fixture
def root(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "file").write_text("outside\n")
    return tmp_path / "root"


def test_a_symlinked_directory_component_is_refused_for_every_write(root):
    outside = root.parent / "outside"
    (root / "dir").symlink_to(outside)
    for write in (
        lambda: safefs.write_atomic(root, "dir/new", b"x"),
        lambda: safefs.create_new(root, "dir/new", b"x"),
        lambda: safefs.open_append(root, "dir/new"),
        lambda: safefs.read_bytes(root, "dir/file"),
        lambda: os.close(safefs.open_dir(root, "dir/sub", create=True)),
    ):
        with pytest.raises(safefs.UnsafePathError) as err:
            write()
        assert err.value.rel == "dir" and "symbolic link" in str(err.value)
    assert sorted(p.name for p in outside.iterdir()) == ["file"]


def test_a_symlinked_file_is_refused_and_a_hard_link_is_not_appended_to(root):
    target = root.parent / "outside" / "file"
    (root / "link").symlink_to(target)
    with pytest.raises(safefs.UnsafePathError):
        safefs.write_atomic(root, "link", b"x")
    with pytest.raises(safefs.UnsafePathError):
        safefs.open_append(root, "link")
    assert safefs.create_new(root, "link", b"x") is False, "a symlink is an existing name, never replaced"
    os.link(target, root / "hard")
    with pytest.raises(safefs.UnsafePathError, match="hard links"):
        safefs.open_append(root, "hard")
    assert target.read_text() == "outside\n"


def test_write_atomic_keeps_mode_of_the_file_it_replaces(root):
    (root / "f").write_text("old\n")
    (root / "f").chmod(0o640)
    safefs.write_atomic(root, "f", b"new\n")
    assert (root / "f").read_text() == "new\n" and (root / "f").stat().st_mode & 0o777 == 0o640
    assert [p.name for p in root.iterdir()] == ["f"], "no temp file left behind"
    safefs.write_atomic(root, "d/e/new", b"x", mode=0o600)
    assert (root / "d" / "e" / "new").stat().st_mode & 0o777 == 0o600


def test_move_never_replaces_and_never_moves_a_symlink(root):
    (root / "a").write_text("a\n")
    (root / "b").write_text("b\n")
    with pytest.raises(FileExistsError):
        safefs.move(root, "a", "b")
    assert (root / "a").read_text() == "a\n" and (root / "b").read_text() == "b\n"
    safefs.move(root, "a", "x/y/a")
    assert not (root / "a").exists() and (root / "x" / "y" / "a").read_text() == "a\n"
    assert (root / "x" / "y" / "a").stat().st_nlink == 1
    (root / "s").symlink_to(root.parent / "outside" / "file")
    with pytest.raises(safefs.UnsafePathError):
        safefs.move(root, "s", "x/s")


def test_escapes_are_not_paths(root):
    for rel in ("../outside/file", "/etc/passwd", "a//b", "./a"):
        with pytest.raises(ValueError):
            safefs.write_atomic(root, rel, b"x")
