"""daemon/ops/posix_acl.py: the git user's rights on a fleet repository's tree, kept on what is made there later."""

from __future__ import annotations

import os
import stat

import pytest

from daemon.ops import posix_acl

UID = 54321  # a user id of nobody here: the rights are the ACL's, not the owner's


def test_an_acl_reads_back_as_written():
    value = posix_acl.encode(7, 5, UID, 5, 0)
    assert posix_acl.decode(value) == [
        (1, 7, 0xFFFFFFFF),
        (2, 5, UID),
        (4, 5, 0xFFFFFFFF),
        (16, 5, 0xFFFFFFFF),
        (32, 0, 0xFFFFFFFF),
    ]
    with pytest.raises(ValueError):
        posix_acl.decode(b"\x01\x00\x00\x00")


def test_a_tree_is_granted_and_what_is_made_in_it_later_inherits_the_grant(tmp_path):
    tree = tmp_path / "objects"
    (tree / "ab").mkdir(parents=True)
    (tree / "ab" / "cdef").write_bytes(b"x")
    os.chmod(tree / "ab" / "cdef", 0o444)
    outside = tmp_path / "outside"
    outside.write_text("not the tree's")
    (tree / "link").symlink_to(outside)
    posix_acl.grant_tree(tree, UID)

    assert posix_acl.named_user(tree) == {UID: 7} and posix_acl.named_user(tree, posix_acl.DEFAULT) == {UID: 7}
    assert posix_acl.named_user(tree / "ab" / "cdef") == {UID: 4}, "what the owner has on a file, no more"
    assert posix_acl.named_user(outside) == {}, "a link is never followed"

    os.umask(0o077)  # the default ACL, not the umask, says what a new entry gives
    try:
        (tree / "ab" / "new").mkdir()
        (tree / "ab" / "new" / "ref").write_text("sha\n")
    finally:
        os.umask(0o022)
    assert posix_acl.named_user(tree / "ab" / "new", posix_acl.DEFAULT) == {UID: 7}
    assert posix_acl.named_user(tree / "ab" / "new" / "ref") == {UID: 7}
    mode = stat.S_IMODE((tree / "ab" / "new" / "ref").stat().st_mode)
    assert mode & 0o060 == 0o060 and not mode & stat.S_ISGID, oct(mode)  # the mask: the named user may write
