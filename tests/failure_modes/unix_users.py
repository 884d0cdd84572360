"""A real second Unix user for a test (tests run as root), removed afterwards."""

from __future__ import annotations

import contextlib
import pwd
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def second_user() -> Iterator[pwd.struct_passwd]:
    """``useradd`` a user without home or shell; ``userdel`` it at the end."""
    name = f"mst{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(path)], check=True)
