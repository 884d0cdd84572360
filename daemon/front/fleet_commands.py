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
@click.option("--authorized-keys", type=click.Path(dir_okay=False, path_type=Path), hidden=True)  # for tests
@json_option
def init_remote_cmd(path: Path, user: str, gate: Path, authorized_keys: Path | None, as_json: bool) -> None:
    """Create the fleet's top repository at PATH (or check and repair it), on the hub, as root.

    \b
    One URL for every host, one bare repository per host behind it:
      PATH                 the hub's own agents' refs and the shared core
      PATH/hosts/HOST.git  HOST's refs (made by `memstrata fleet authorize`)
    A host's key reaches its own repository only, so no object of another
    host's (its id known or guessed) is ever there to fetch.

    \b
    - config: core.logAllRefUpdates=always (a reflog: every update of a ref is
      on record), receive.denyNonFastForwards, receive.denyDeletes, receive.fsckObjects
    - hooks/update: a push through ssh (the gate names its host) writes
      refs/memstrata/HOST/ of HOST's repository only; a push through PATH on the hub
      itself writes under refs/memstrata/ (the shared core refs/memstrata/shared/core
      is the hub's alone)
    - hooks/post-receive (PATH's): the shared core, when it moves, copied into every
      PATH/hosts/*.git (never forced)
    - owners: PATH, hosts/, each repository's config and hooks are root's; their objects,
      refs and logs are writable by --user's group
    - the gate (--gate, standard library only, PATH written in): the forced command
      `memstrata fleet authorize` gives each host's key; it serves git-upload-pack and
      git-receive-pack on PATH, from PATH/hosts/HOST.git, and nothing else; a host sees
      and fetches only its own refs and the shared core

    Safe to run again: it sets what differs, rewrites the hooks and the gate, makes or
    repairs the repository of every host (those under PATH/hosts/, and those --user's
    authorized_keys has a gated line for) and copies the shared core into it. Refs of hosts found in
    PATH itself (pushed before the repositories per host) are listed and left there.
    Then, for each host: memstrata fleet authorize HOST HOST-KEY.pub
    """
    remote = _remote()
    try:
        steps = remote.init_remote(path.absolute(), user=user, gate=gate, authorized_keys=authorized_keys)
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

    Makes HOST's own repository, PATH/hosts/HOST.git (PATH: the repository the gate
    serves), with the current shared core in it, then writes the line

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
