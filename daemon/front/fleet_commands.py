"""CLI: ``memstrata fleet init-remote`` and ``memstrata fleet authorize``, run on the hub (the logic
is daemon/ops/fleet_remote.py; the gate they install is daemon/ops/fleet_gate.py); ``add-host``,
``hosts`` and ``remove-host``: the hosts the hub's peer API serves L4 to (daemon/ops/fleet_peers.py)."""

from __future__ import annotations

from pathlib import Path

import click

from daemon.front.options import Report, config_of, echo_json, json_option


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


def _peers():
    from daemon.ops import fleet_peers

    return fleet_peers


@fleet.command("add-host")
@click.argument("host")
@click.option("--agent", "agents", multiple=True, required=True, metavar="ID", help="An agent id HOST may act as.")
@click.option(
    "--key-file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where HOST's key is written (mode 0600), for its conversation.hub.key_file.",
)
@click.option("--new-key", is_flag=True, help="Give HOST a new key (its old one stops working).")
@json_option
@click.pass_context
def add_host_cmd(
    ctx: click.Context, host: str, agents: tuple[str, ...], key_file: Path, new_key: bool, as_json: bool
) -> None:
    """Let HOST's agents use the hub's L4 through its peer API (fleet.listen), on the hub.

    \b
    Makes a random key for HOST, writes it to --key-file (mode 0600; an existing file is
    refused unless it holds HOST's current key) and records HOST in the hub's state
    directory (fleet/peers.json): the key's SHA-256, never the key, and the agent ids
    HOST may act as. On the hub agent X of HOST is "HOST/X": the owner of its memories,
    a member of projects as "HOST/X" in the project registry.
    Run again with other --agent values to change them (the key is kept); --new-key
    replaces the key. A running daemon sees the change at its next request.
    """
    peers = _peers()
    try:
        steps = peers.add_host(config_of(ctx).paths.state_dir, host, agents, key_file.absolute(), new_key=new_key)
    except (peers.RemoteError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    report = Report(as_json)
    for action, what in steps.lines:
        report.say(f"{action:<8} {what}")
    report.done(host=host, agents=list(dict.fromkeys(agents)), key_file=str(key_file.absolute()))


@fleet.command("hosts")
@json_option
@click.pass_context
def hosts_cmd(ctx: click.Context, as_json: bool) -> None:
    """The hosts enrolled for the hub's peer API and the agents each may act as (never a key)."""
    peers = _peers()
    try:
        hosts = peers.read_peers(peers.peers_path(config_of(ctx).paths.state_dir))
    except (peers.RemoteError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    rows = [{"host": h, "agents": list(e.get("agents") or []), "changed": e.get("changed")} for h, e in hosts.items()]
    if as_json:
        echo_json({"hosts": rows})
        return
    if not rows:
        click.echo("no hosts enrolled (memstrata fleet add-host HOST --agent ID --key-file PATH)")
    for row in rows:
        click.echo(f"{row['host']:<20} {', '.join(row['agents'])}")


@fleet.command("remove-host")
@click.argument("host")
@json_option
@click.pass_context
def remove_host_cmd(ctx: click.Context, host: str, as_json: bool) -> None:
    """Forget HOST: its key stops working at the hub's next request (its memories stay on the hub)."""
    peers = _peers()
    try:
        steps = peers.remove_host(config_of(ctx).paths.state_dir, host)
    except (peers.RemoteError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    report = Report(as_json)
    for action, what in steps.lines:
        report.say(f"{action:<8} {what}")
    report.done(host=host)
