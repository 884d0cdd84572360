#!/usr/bin/env python3
"""Search an agent's L3 index without the daemon (the seed's LocalSearchFallback).

Reads the per-agent SQLite index read-only (SQLite WAL lets it read while the
daemon writes), full-text only: it never loads a model.  Use it when the daemon
is down; `memstrata search` is the everyday entry point.

    python3 local_search.py "Qdrant 端口" [--agent main] [--json] [--limit 10] [--config FILE]

Not standard library only, unlike mem0_client.py: the index is read by memstrata's
own reader (apsw for FTS5, the query parser that makes Chinese searchable per
character), which no other interpreter has.  So run it with any python3: it
re-executes itself with memstrata's virtualenv when it was started with another
interpreter.  In a
workspace's copy of the skill the agent defaults to that workspace's
(``$MEMSTRATA_AGENT`` overrides it), and the configuration to the installed one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # run from an agent's workspace: leave no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # found even under `python3 -I`

from _memstrata_env import installed_agent, use_memstrata  # noqa: E402

use_memstrata(__file__)

from daemon.common.terminal import escaped  # noqa: E402
from daemon.front.cli import echo_json  # noqa: E402
from daemon.front.local_commands import local_search, print_search  # noqa: E402
from daemon.front.options import paths_config, say_config_broken  # noqa: E402
from protocol.locations import CONFIG_ENV  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import argparse

    from daemon.common.daemon_limits import QueryTooLongError, check_query
    from daemon.common.domain_errors import UnknownAgentError
    from layers.common.yamlfile import YamlFileError
    from layers.local.text.query import EmptyQueryError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("query")
    default_agent = os.environ.get("MEMSTRATA_AGENT") or installed_agent()
    parser.add_argument(
        "--agent",
        default=default_agent,
        required=default_agent is None,
        help="agent id (main, or a spoke; default: $MEMSTRATA_AGENT, else this workspace's agent)",
    )
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--config", type=Path, default=os.environ.get(CONFIG_ENV), help=f"configuration file (or ${CONFIG_ENV})"
    )
    args = parser.parse_args(argv)
    try:
        check_query(args.query)
    except QueryTooLongError as exc:
        print(f"local_search: {escaped(str(exc))}", file=sys.stderr)
        return 2
    try:
        # the index's path is all it needs: a configuration file broken since its last good version (the
        # running daemon's) is said on stderr, and the search answers from that version's paths
        config, broken = paths_config(Path(args.config) if args.config else None)
        if broken is not None:
            say_config_broken(broken)
        answer = local_search(
            config,
            args.agent,
            args.query,
            mode="fts",
            limit=args.limit,
            filters=None,
            explain=False,
            reason="local_search.py reads the index without a model",
        )
    except (YamlFileError, UnknownAgentError, EmptyQueryError, ValueError) as exc:
        print(f"local_search: {escaped(str(exc), keep_newlines=True)}", file=sys.stderr)
        return 1
    except Exception as exc:  # click.ClickException and friends: one line, no traceback
        print(f"local_search: {escaped(str(getattr(exc, 'message', exc)), keep_newlines=True)}", file=sys.stderr)
        return 1
    answer["degraded"] = True
    answer["reason"] = "searched the local index directly (daemon not used)"
    if args.json:
        echo_json(answer)
    else:
        print_search(answer, explain=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
