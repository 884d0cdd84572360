"""How a ``memstrata`` call ends: its exit status, and its error as text or as JSON.

One table for every command, so a script can rely on it (``memstrata --help`` prints it):

    0  done
    1  runtime failure (a refusal, a bad configuration, a store that cannot answer)
    2  usage error: a bad option or argument, an invalid id, an agent that does not exist
    3  the daemon is unreachable (not running, or its socket is not ours to use)

With ``--json`` the error is ``{"error": {"code": ..., "message": ...}}`` on stdout (the same
exit status), so a caller that parses stdout never meets an empty answer; the one-line message
still goes to stderr for a person watching.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import click

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


class Failure(click.ClickException):
    """A failure a person or a script can act on: a message, a stable ``code`` and an exit status."""

    code = "failed"
    exit_code = EXIT_RUNTIME

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


class UsageFailure(Failure):
    """What was asked cannot be done as asked (exit 2): fix the command line."""

    code = "usage"
    exit_code = EXIT_USAGE


class UnreachableFailure(Failure):
    """No daemon answers (exit 3), as ``systemctl status`` says of a stopped unit."""

    code = "daemon_unreachable"
    exit_code = EXIT_UNREACHABLE


def classify(exc: BaseException) -> Failure | None:
    """The failure ``exc`` stands for, or None for a bug (which keeps its traceback).

    Imports are local: the domain errors live in modules a light command may never load.
    """
    from daemon.common.domain_errors import UnknownAgentError
    from daemon.front.daemon_client import DaemonUnavailableError
    from layers.common.ids import InvalidIdError
    from layers.common.safefs import UnsafePathError
    from layers.daily import workspace_repo as daily
    from layers.daily.git.run import GitFailed
    from layers.local.text.query import EmptyQueryError

    if isinstance(exc, Failure):
        return exc
    if isinstance(exc, click.UsageError):
        failure: Failure = UsageFailure(exc.format_message())
        failure.usage_error = exc  # type: ignore[attr-defined]  # shown with its usage line in text mode
        return failure
    if isinstance(exc, click.Abort):
        return Failure("aborted", "aborted")
    if isinstance(exc, click.ClickException):  # raised by a command: its status says which kind
        kind = {EXIT_USAGE: UsageFailure, EXIT_UNREACHABLE: UnreachableFailure}.get(exc.exit_code, Failure)
        return kind(exc.format_message())
    if isinstance(exc, UnknownAgentError):
        return UsageFailure(str(exc), "unknown_agent")
    if isinstance(exc, InvalidIdError):
        return UsageFailure(str(exc), "invalid_id")
    if isinstance(exc, EmptyQueryError):  # as the daemon's 400 for the same query
        return UsageFailure(str(exc), "invalid_request")
    if isinstance(exc, DaemonUnavailableError):
        return UnreachableFailure(str(exc))
    if isinstance(exc, daily.RepoBusyError):
        return Failure(f"{exc}; try again in a moment", "busy")
    if isinstance(exc, (FileNotFoundError, ValueError, UnsafePathError, daily.RepoRefusedError, GitFailed)):
        # a bad configuration or registry is a layers.common.yamlfile.YamlFileError, a ValueError (file, key, line)
        return Failure(str(exc))
    return None


def show(failure: Failure, as_json: bool) -> None:
    """Say what failed: JSON on stdout (and the line on stderr) with ``--json``, else click's text.

    A message may quote what an agent wrote (a file name, a daemon's refusal naming a value): its
    control characters are escaped on the terminal (daemon/common/terminal.py), exact in the JSON."""
    from daemon.common.terminal import escaped, json_text

    message = failure.format_message()
    if as_json:
        click.echo(json_text({"error": {"code": failure.code, "message": message}}))
        click.echo(f"Error: {escaped(message, keep_newlines=True)}", err=True)
        return
    usage_error = getattr(failure, "usage_error", None)
    if usage_error is not None:  # with its usage line and hint, as click shows it
        click.UsageError(escaped(usage_error.message, keep_newlines=True), usage_error.ctx).show()
        return
    click.ClickException(escaped(message, keep_newlines=True)).show()


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON (``--json`` before any ``--``), known before parsing
    so that an error in the parsing itself is answered in JSON too."""
    args = list(args)
    if "--" in args:
        args = args[: args.index("--")]
    return "--json" in args


def colour_allowed() -> bool:
    """False when ``NO_COLOR`` is set (https://no-color.org) or the terminal is ``dumb``; click
    itself strips colour when the output is not a terminal."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
