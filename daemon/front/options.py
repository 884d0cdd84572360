"""What every ``memstrata`` command module shares: the configuration of the call, JSON output, options.

Kept apart from daemon/front/cli.py (the group and its registrations) so the command
modules import this and cli.py imports them: no import circle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from daemon.shared.config import Config
    from daemon.shared.config_cache import FrontConfig


class JsonObject(click.ParamType):
    """An option whose value is a JSON object (mem0's filters, a memory's metadata): ``'{"user_id": "alice"}'``."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            self.fail(f"not JSON: {str(value)[:80]!r}", param, ctx)
        if not isinstance(parsed, dict):
            self.fail('must be a JSON object, like \'{"user_id": "alice"}\'', param, ctx)
        return parsed


JSON_OBJECT = JsonObject()


def config_of(ctx: click.Context) -> Config:
    """The configuration of this call, loaded once (``--config``, else the defaults' search)."""
    from daemon.shared.config import load_config  # pydantic: only for the commands that read the configuration

    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        obj["config"] = load_config(obj.get("config_path"))
    return obj["config"]


def front_config(ctx: click.Context) -> Config | FrontConfig:
    """The configuration's resolved paths, for a call that only talks to a running daemon.

    From the validated-configuration cache (daemon/shared/config_cache.py) when the file,
    its path, the environment and the code are those of an earlier full validation;
    else validated in full here (same errors as :func:`config_of`) and recorded.
    Only ``.paths`` and ``.source`` may be read from what this returns: anything
    else (a daemon that is down, another layer) goes through :func:`config_of`.
    """
    from daemon.shared import config_cache

    obj = ctx.ensure_object(dict)
    if "config" in obj:
        return obj["config"]
    raw = config_cache.read_config_bytes(obj.get("config_path"))
    if raw is not None:
        cached = config_cache.load(raw)
        if cached is not None:
            return cached
        try:
            text = raw.raw.decode("utf-8")
        except UnicodeDecodeError:
            return config_of(ctx)  # the full reader names the line of the bad byte
        from daemon.shared.config import parse_config

        obj["config"] = config = parse_config(text, raw.path)  # the very bytes the key hashes
        config_cache.store(raw, config.paths)
        return config
    return config_of(ctx)


def echo_json(data: object) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


agent_option = click.option("--agent", "agent_id", required=True, metavar="ID", help="Agent id (main, or a spoke).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


class QueryRefusedError(click.ClickException):
    """A query over the documented limit: a usage error (exit 2), said in one line."""

    exit_code = 2


def request_failed(exc: Exception) -> click.ClickException:
    """The daemon's refusal as one line; a query it found too long (413) is a usage error."""
    status = getattr(exc, "status", None)
    return QueryRefusedError(str(exc)) if status == 413 else click.ClickException(str(exc))


def placement(memory: Mapping[str, Any]) -> str:
    """Where a memory lives, as every listing shows it: ``public``, ``private`` or ``project:ID``."""
    return memory["visibility"] + (f":{memory['project_id']}" if memory.get("project_id") else "")


def conversation_failed(exc: Exception) -> click.ClickException:
    from daemon.front.client import DaemonUnavailableError

    if isinstance(exc, DaemonUnavailableError):
        return click.ClickException(f"{exc}: conversation memory is served by the daemon (`memstrata run`)")
    return request_failed(exc)
