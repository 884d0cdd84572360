"""Shared by the skill's scripts that need memstrata's libraries (not mem0_client.py, which is stdlib only).

They are run with whatever python3 an agent or cron has, from the checkout or
from a copy in an agent's workspace (``{workspace}/skills/mem0-integration``).
A copy finds memstrata through ``memstrata-install.json`` next to it (written by
``memstrata install``/``init``/``agent add`` and the daemon): the virtualenv's
python, the checkout, the configuration and the workspace's agent.  In the
checkout itself the repository is two directories up.  Started with any other
interpreter, the script re-executes itself with memstrata's python.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "memstrata-install.json"
CONFIG_ENV = "MEMSTRATA_CONFIG"


def installed() -> dict:
    """The launcher file's settings; empty in the checkout (or when the file is unreadable)."""
    try:
        data = json.loads(LAUNCHER.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def installed_agent() -> str | None:
    """The agent whose workspace this copy of the skill lives in (None in the checkout)."""
    agent = installed().get("agent")
    return agent if isinstance(agent, str) and agent else None


def use_memstrata(script: str) -> None:
    """Make ``daemon`` and ``layers`` importable, re-executing ``script`` with memstrata's python if needed.

    Whenever memstrata's python exists and is not the one running, the script
    re-executes with it: that interpreter has every library the script may
    reach (apsw, the store), while another python may import the light front
    (click alone suffices) and fail later.  The configuration written at
    install becomes ``$MEMSTRATA_CONFIG`` unless that is set (``--config`` on the
    command line still wins over both).
    """
    info = installed()
    checkout = Path(info["checkout"]) if isinstance(info.get("checkout"), str) else HERE.parents[1]
    python = Path(info["python"]) if isinstance(info.get("python"), str) else checkout / ".venv" / "bin" / "python"
    if isinstance(info.get("config"), str) and not os.environ.get(CONFIG_ENV):
        os.environ[CONFIG_ENV] = info["config"]
    venv = python.parent.parent
    # compare prefixes, not binaries: a venv's python is a symlink to the system one
    if python.exists() and Path(sys.prefix).resolve() != venv.resolve():
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # leave no caches in the agent's workspace
        os.execve(str(python), [str(python), script, *sys.argv[1:]], env)
    sys.path.insert(0, str(checkout))
    try:
        import apsw  # noqa: F401 - the heaviest library a script reaches; the front alone imports without it

        import daemon.front.cli  # noqa: F401
    except ImportError as exc:
        where = f"memstrata at {checkout} with {python}"
        raise SystemExit(
            f"{Path(script).name}: cannot load {where} ({exc}); "
            "run `memstrata install` (or `make setup` in the checkout) again"
        ) from None
