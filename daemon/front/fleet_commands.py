"""CLI: ``memstrata fleet init-remote`` and ``memstrata fleet authorize``, run on the hub (the logic
is daemon/ops/fleet_remote.py; the gate they install is daemon/ops/fleet_gate.py)."""

from __future__ import annotations

from pathlib import Path

import click

from daemon.front.options import Report, json_option


def _remote():
    from daemon.ops import fleet_remote

    return fleet_remote


_gate_option = click.option(
    "--gate",
    type=click.Path(dir_okay=False, path_type=Path),
    default="/usr/local/lib/memstrata/fleet-gate",
    show_default=True,
    help="Where the gate (the keys' forced command) is installed.",
)
_user_option = click.option(
    "--user", default="git", show_default=True, help="The account the hosts log in as (its shell: git-shell)."
)


@click.group()
def fleet() -> None:
    """The fleet's remote on the hub: its repository, and which host's key may do what."""


@fleet.command("init-remote")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@_user_option
@_gate_option
@json_option
def init_remote_cmd(path: Path, user: str, gate: Path, as_json: bool) -> None:
    """Create the fleet's bare repository at PATH (or check and repair an existing one), on the hub, as root.

    \b
    - config: core.logAllRefUpdates=always (a reflog: every update of a ref is
      on record), receive.denyNonFastForwards, receive.denyDeletes, receive.fsckObjects
    - hooks/update: a push through ssh (the gate names its host) writes
      refs/memstrata/HOST/ only; a push through PATH on the hub itself writes under
      refs/memstrata/ (the shared core refs/memstrata/shared/core is the hub's alone)
    - owners: PATH, its config and hooks are root's; its objects, refs and logs are
      writable by --user's group
    - the gate (--gate, standard library only, this repository written in): the forced
      command `memstrata fleet authorize` gives each host's key; it serves git-upload-pack
      and git-receive-pack on PATH and nothing else; a host sees and fetches only its
      own refs and the shared core

    Safe to run again: it sets what differs and rewrites the hook and the gate.
    Then, for each host: memstrata fleet authorize HOST HOST-KEY.pub
    """
    remote = _remote()
    try:
        steps = remote.init_remote(path.absolute(), user=user, gate=gate)
    except (remote.RemoteError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    report = Report(as_json)
    for action, what in steps.lines:
        report.say(f"{action:<8} {what}")
    report.done(repository=str(path.absolute()), gate=str(gate), user=user)


@fleet.command("authorize")
@click.argument("host")
@click.argument("pubkey_file", metavar="PUBKEY_FILE", type=click.Path(dir_okay=False, path_type=Path))
@_user_option
@_gate_option
@click.option("--authorized-keys", type=click.Path(dir_okay=False, path_type=Path), hidden=True)  # for tests
@json_option
def authorize_cmd(
    host: str, pubkey_file: Path, user: str, gate: Path, authorized_keys: Path | None, as_json: bool
) -> None:
    """Let HOST's key (PUBKEY_FILE, e.g. its fleet-key.pub) push and fetch through the gate, as root on the hub.

    Writes the line

    \b
      command="GATE HOST",restrict KEY memstrata:HOST

    into --user's ~/.ssh/authorized_keys (atomically, mode 0600, owned by the user): that key
    reaches nothing but the gate, which lets it write refs/memstrata/HOST/ and read those and
    the shared core. A line of the same host is replaced (a new key for it); a key already
    given to another host, or on a line of its own without the gate, is refused. HOST is
    1-64 characters of a-z, 0-9, '_' and '-' (an agent id's rule); 'shared' is reserved.
    """
    remote = _remote()
    try:
        target, line, steps = remote.authorize(host, pubkey_file, user=user, gate=gate, authorized_keys=authorized_keys)
    except (remote.RemoteError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    report = Report(as_json)
    for action, what in steps.lines:
        report.say(f"{action:<8} {what}")
    report.done(host=host, authorized_keys=str(target), line=line)
