#!/usr/bin/python3 -I
"""The fleet's gate: the forced command of every host's key on the hub (``authorized_keys``).

sshd runs ``fleet-gate HOST`` for whatever a key's holder asks, the request in
``SSH_ORIGINAL_COMMAND``.  Exactly two requests are served, both naming the fleet's one URL:
``git-upload-pack '<REPOSITORY>'`` (fetch, ls-remote) and ``git-receive-pack '<REPOSITORY>'``
(push), compared as whole strings (nothing is parsed, no shell ever sees them); anything else is
refused on stderr with exit 1.  Either is served from ``<REPOSITORY>/hosts/HOST.git``, the host's
own bare repository (``memstrata fleet authorize`` makes it): another host's objects are never in
it, so no object id, known or guessed, reaches them (hidden refs hide names, not objects:
gitnamespaces(7), "Security").  What a host may then do there:

- **read** its own refs (``refs/memstrata/HOST/``: its agents', for a restore) and the shared core
  (``refs/memstrata/shared/``, copied in by the hub): upload-pack hides every other ref, and asking
  for an object by id is off (``allowTipSHA1InWant``, ``allowReachableSHA1InWant``,
  ``allowAnySHA1InWant`` false; protocol v0 only: ``GIT_PROTOCOL`` is not passed on);
- **write** its own refs only: receive-pack hides (so refuses) every other ref, and the
  repository's ``update`` hook checks ``MEMSTRATA_FLEET_HOST`` against the repository's host; never
  forced, never deleted (given here on git's command line too, whatever the repository's config says).

Standard library only, run as the hub's ``git`` user: ``memstrata fleet init-remote`` installs a copy
of this file with :data:`REPOSITORY` written in (outside any checkout, owned by root).
"""

from __future__ import annotations

import os
import pwd
import re
import sys

REPOSITORY = "/srv/memstrata/fleet.git"  # the installed copy says the repository it guards
GIT = "/usr/bin/git"
HOST_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"  # protocol/vocabulary.py's AGENT_ID_PATTERN (a test holds them equal)
RESERVED_HOSTS = ("shared",)  # refs/memstrata/shared/ is the hub's shared core
SHARED = "refs/memstrata/shared/"
HOSTS = "hosts"  # <REPOSITORY>/hosts/<host>.git: each host's own repository
SERVICES = ("git-upload-pack", "git-receive-pack")
PROG = "memstrata fleet gate"


def valid_host(host: str) -> bool:
    return re.fullmatch(HOST_PATTERN, host) is not None and host not in RESERVED_HOSTS


def service_of(command: str | None, repository: str) -> str | None:
    """The git service asked for, when ``command`` is exactly one of the two on ``repository``."""
    for service in SERVICES:
        if command == f"{service} '{repository}'":
            return service
    return None


def host_repository(repository: str, host: str) -> str:
    """Where ``host``'s own repository is, under the fleet's one URL."""
    return f"{repository}/{HOSTS}/{host}.git"


def git_argv(service: str, host: str, repository: str) -> list[str]:
    """The git command run for ``service`` on ``repository`` (the host's own): the rules are on its
    command line, not left to the config."""
    own = f"refs/memstrata/{host}/"
    # the repository is root's (its config and hooks are not the git user's to change)
    argv = [GIT, "-c", f"safe.directory={repository}"]
    if service == "git-upload-pack":
        hidden = ("refs", "HEAD", f"!{own}", f"!{SHARED}")  # the last matching line wins; '!' shows
        for pattern in hidden:
            argv += ["-c", f"uploadpack.hideRefs={pattern}"]
        for want in ("allowTipSHA1InWant", "allowReachableSHA1InWant", "allowAnySHA1InWant"):
            argv += ["-c", f"uploadpack.{want}=false"]
        return [*argv, "upload-pack", "--strict", repository]
    for pattern in ("refs", "HEAD", f"!{own}"):  # a hidden ref cannot be pushed to, nor seen
        argv += ["-c", f"receive.hideRefs={pattern}"]
    for rule in ("denyNonFastForwards=true", "denyDeletes=true", "fsckObjects=true", "autogc=false"):
        argv += ["-c", f"receive.{rule}"]
    return [*argv, "receive-pack", repository]


def environment(service: str, host: str) -> dict[str, str]:
    """A clean environment: nothing of the client's (``GIT_PROTOCOL``, ``LC_*``) reaches git."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = "/"
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C"}
    if service == "git-receive-pack":
        env["MEMSTRATA_FLEET_HOST"] = host  # the update hook's prefix
    return env


def refuse(message: str) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    return 1


def main(argv: list[str], environ: dict[str, str]) -> int:
    if len(argv) != 2 or not valid_host(argv[1]):
        return refuse(f"refused: this key's forced command names no valid host ({argv[1:]!r})")
    host = argv[1]
    command = environ.get("SSH_ORIGINAL_COMMAND")
    service = service_of(command, REPOSITORY)
    if service is None:
        shown = "an interactive login" if command is None else repr(command[:200])
        return refuse(
            f"refused {shown} for host {host}: only git-upload-pack and git-receive-pack on '{REPOSITORY}' are served"
        )
    own = host_repository(REPOSITORY, host)
    if not os.path.isfile(f"{own}/HEAD") or os.path.islink(own):
        return refuse(
            f"host {host} has no repository on the hub yet (as root there: memstrata fleet authorize {host} ...)"
        )
    sys.stderr.flush()
    os.execve(GIT, git_argv(service, host, own), environment(service, host))
    return 1  # not reached: execve replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv, dict(os.environ)))
