"""What every ``memstrata`` command module shares: the configuration of the call, JSON output, options.

Kept apart from daemon/cli.py (the group and its registrations) so the command
modules import this and cli.py imports them: no import circle.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from daemon.config import Config


def config_of(ctx: click.Context) -> Config:
    """The configuration of this call, loaded once (``--config``, else the defaults' search)."""
    from daemon.config import load_config  # pydantic: only for the commands that read the configuration

    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        obj["config"] = load_config(obj.get("config_path"))
    return obj["config"]


def echo_json(data: object) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


agent_option = click.option("--agent", "agent_id", required=True, metavar="ID", help="Agent id (main, or a spoke).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
