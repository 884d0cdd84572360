"""The ``memstrata`` command: ``python -m daemon``, and the console script (pyproject.toml)."""

import sys

from daemon.service.early_signals import install_for  # the standard library only: before the CLI's imports


def entry() -> None:
    install_for(sys.argv[1:])  # ``memstrata run``: a SIGHUP from here on is a reload, never the end
    from daemon.front.cli import main

    main(prog_name="memstrata")


if __name__ == "__main__":
    entry()
