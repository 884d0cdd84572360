"""Shared by the skill's scripts that need memstrata's libraries (not mem0_client.py, which is stdlib only).

They are run with whatever python3 an agent or cron has; when memstrata's
libraries are not importable there, the script re-executes itself with the
repository's virtualenv.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def use_memstrata(script: str) -> None:
    """Make ``daemon`` and ``layers`` importable, re-executing ``script`` in the virtualenv if needed."""
    sys.path.insert(0, str(REPO))
    try:
        import daemon.cli  # noqa: F401
    except ImportError:
        venv = REPO / ".venv"
        venv_python = venv / "bin" / "python"
        # compare prefixes, not binaries: a venv's python is a symlink to the system one
        if venv_python.exists() and Path(sys.prefix).resolve() != venv.resolve():
            os.execv(str(venv_python), [str(venv_python), script, *sys.argv[1:]])
        raise
