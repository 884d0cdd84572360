"""POSIX ACLs of one named user on a tree: what lets the git user behind the gate write what root made.

The fleet's repositories are written by two users: root (the hub's daemon pushing by path, the top's
post-receive hook, ``memstrata fleet authorize``) and the ``git`` user behind the gate.  Each must be
able to add objects and refs in directories the other made.  Group ownership kept by set-group-ID
directories did that before, but git then chmods every directory it makes with the set-group-ID bit,
which the daemon's unit refuses (``RestrictSUIDSGID=yes``) and which the kernel clears for root
outside the group.  A default ACL on each directory instead hands the named user its rights on
whatever is made below, whoever makes it, with no mode bit to set: the unit stays as shipped.

Written as the kernel's extended attributes (``system.posix_acl_access`` / ``_default``, the
format of linux/posix_acl_xattr.h) with the standard library: a few lines, where ``setfacl`` would be
one more package on every hub.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from pathlib import Path

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_UNDEFINED = 0xFFFFFFFF


class AclUnsupported(OSError):
    """The filesystem keeps no POSIX ACLs (mounted without them, or a kind that has none)."""


def encode(owner: int, user: int, uid: int, group: int, other: int) -> bytes:
    """An ACL of the owner, one named user ``uid``, the owning group and others (rwx bits, 0-7 each);
    the mask lets the named user and the group have what they are given."""
    entries = [
        (_USER_OBJ, owner, _UNDEFINED),
        (_USER, user, uid),
        (_GROUP_OBJ, group, _UNDEFINED),
        (_MASK, user | group, _UNDEFINED),
        (_OTHER, other, _UNDEFINED),
    ]
    return struct.pack("<I", _VERSION) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def decode(value: bytes) -> list[tuple[int, int, int]]:
    """(tag, perm, id) of each entry: what a test or a check reads back."""
    (version,) = struct.unpack_from("<I", value)
    if version != _VERSION:
        raise ValueError(f"POSIX ACL version {version}")
    return [struct.unpack_from("<HHI", value, offset) for offset in range(4, len(value), 8)]


def named_user(path: Path, acl: str = ACCESS) -> dict[int, int]:
    """uid -> the rights a named-user entry of ``path``'s ACL gives (before the mask); {} when none."""
    try:
        value = os.getxattr(path, acl, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise
    return {id_: perm for tag, perm, id_ in decode(value) if tag == _USER}


def grant_tree(root: Path, uid: int) -> None:
    """``uid`` gets what the owner has on ``root`` and everything below it (never following a link),
    and every directory there a default ACL: what is made in it later is ``uid``'s to use too."""
    for here, _dirs, files in os.walk(root):  # a link to a directory is listed, not walked
        _grant(Path(here), uid)
        for name in files:
            _grant(Path(here) / name, uid)


def _grant(path: Path, uid: int) -> None:
    st = path.lstat()
    mode = stat.S_IMODE(st.st_mode)
    owner, group, other = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7
    try:
        if stat.S_ISDIR(st.st_mode):
            os.setxattr(path, DEFAULT, encode(7, 7, uid, 5, 5), follow_symlinks=False)
            os.setxattr(path, ACCESS, encode(owner, 7, uid, group, other), follow_symlinks=False)
        elif stat.S_ISREG(st.st_mode):
            os.setxattr(path, ACCESS, encode(owner, owner, uid, group, other), follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise AclUnsupported(exc.errno, f"the filesystem of {path} keeps no POSIX ACLs") from None
        raise
