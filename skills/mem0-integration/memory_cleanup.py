#!/usr/bin/env python3
"""Delete expired conversation memories: the seed's cron job, as `memstrata cleanup`.

    python3 memory_cleanup.py --dry-run                 # preview (and audit) what is expired
    python3 memory_cleanup.py --execute                 # delete it (cron: 03:00 UTC)
    python3 memory_cleanup.py --execute --max-age-days 14   # force: expiring types after 14 days
    python3 memory_cleanup.py --dry-run --json --config /etc/memstrata/memstrata.yaml

The configuration is --config FILE, else $MEMSTRATA_CONFIG, else the system file.
Every option of `memstrata cleanup --help` works here. Exit status: 0 done,
1 something failed, 2 usage. Not standard library only, unlike mem0_client.py: with
the daemon down the cleanup opens the store itself (memstrata's own code, Qdrant
Edge), so it runs with any python3 and re-executes itself with memstrata's
virtualenv when needed.
"""

from __future__ import annotations

import os
import sys

sys.dont_write_bytecode = True  # run from an agent's workspace: leave no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # found even under `python3 -I`

from _memstrata_env import use_memstrata  # noqa: E402

use_memstrata(__file__)

from daemon.front.cli import main as memstrata  # noqa: E402


def command_line(argv: list[str]) -> list[str]:
    """``--config`` belongs to memstrata itself (before the command); the rest goes to ``cleanup``."""
    front, rest = [], []
    args = iter(argv)
    for arg in args:
        if arg == "--config":
            front += [arg, next(args, "")]
        elif arg.startswith("--config="):
            front.append(arg)
        else:
            rest.append(arg)
    return [*front, "cleanup", *rest]


if __name__ == "__main__":
    memstrata(command_line(sys.argv[1:]), prog_name="memory_cleanup.py")
