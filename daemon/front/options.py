"""What every ``memstrata`` command module shares: the configuration of the call, JSON output, options.

Kept apart from daemon/front/cli.py (the group and its registrations) so the command
modules import this and cli.py imports them: no import circle.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from daemon.common.terminal import escaped, json_text
from daemon.front.failures import Failure, UnreachableFailure, UsageFailure
from protocol.vocabulary import DAY_PATTERN

if TYPE_CHECKING:
    from daemon.common.config import Config
    from daemon.common.config_cache import FrontConfig
    from protocol.fields import Field


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

F = TypeVar("F", bound=Callable[..., Any])


def option_of(
    field: Field,
    *,
    flag: str | None = None,
    dest: str | None = None,
    when: str | None = None,
    **click_kwargs: Any,
) -> click.Option:
    """A click option for an operation's field (protocol/operations.py): the type from its kind, choices
    and bounds, the help from its help, the default from its default (None: left to the daemon).

    ``flag`` is the CLI's name when it is not the field's (``--type`` for ``memory_type``; a bool left
    to the daemon is ``--x/--no-x`` unless ``flag`` names one switch); ``dest`` the command's parameter
    (default: the field's name); ``when`` the condition the help starts with ("With --all"); anything else
    is click's own keyword, and wins (the few places the CLI says more than the field, or less).
    """
    name = field.name.replace("_", "-")
    flag = flag or (f"--{name}/--no-{name}" if field.kind is bool and field.default is None else f"--{name}")
    help_text = field.help if when is None else f"{when}: {field.help[:1].lower()}{field.help[1:]}"
    kwargs: dict[str, Any] = {"help": help_text}
    default = click_kwargs.pop("default", None if field.required else field.default)
    if field.kind is bool:
        kwargs["is_flag"] = True
        kwargs["default"] = default if "/" in flag else bool(default)
    else:
        if field.choices is not None:
            kwargs["type"] = click.Choice(field.choices)
        elif field.kind is int:
            kwargs["type"] = click.IntRange(_bound(field.low), _bound(field.high))
        elif field.kind is float:
            kwargs["type"] = click.FloatRange(field.low, field.high)
        elif field.kind is dict:
            kwargs["type"], kwargs["metavar"] = JSON_OBJECT, "JSON"
        elif field.pattern == DAY_PATTERN:
            kwargs["metavar"] = "YYYY-MM-DD"
        if default is not None:
            kwargs["default"], kwargs["show_default"] = default, True
    kwargs.update(click_kwargs)
    return click.Option([flag, dest or field.name], **kwargs)


def _bound(value: float | None) -> int | None:
    return None if value is None else int(value)


class _Deferred:
    """Options a :class:`FieldsCommand` makes the first time its parameters are read (parsed, shown)."""

    def __init__(self, make: Callable[[], list[click.Option]]) -> None:
        self.make = make


class FieldsCommand(click.Command):
    """A command whose field options (:func:`field_options`) are made when it is first parsed or shown,
    not when the CLI is imported: ``memstrata --help`` and every other command do not pay for them."""

    @property  # type: ignore[override]
    def params(self) -> list[click.Parameter]:
        given: list[Any] = self.__dict__["_params"]
        if any(isinstance(p, _Deferred) for p in given):
            given = [q for p in given for q in (p.make() if isinstance(p, _Deferred) else [p])]
            self.__dict__["_params"] = given
        return given

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self.__dict__["_params"] = value


def field_options(operation: str, *names: str, when: str | None = None, **spelled: dict[str, Any]) -> Callable[[F], F]:
    """Click options for the named fields of the operation class ``operation`` of protocol/operations.py, in that
    order; ``spelled``: a field's :func:`option_of` keywords (its flag, dest, metavar…), by the field's name.
    Made when the command (a :class:`FieldsCommand`) is first parsed or shown: importing the operations and
    reading their fields is left to the commands that use them."""

    def make() -> list[click.Option]:
        from protocol import operations
        from protocol.fields import describe

        fields = {f.name: f for f in describe(getattr(operations, operation))}
        unknown = (set(names) | set(spelled)) - set(fields)
        if unknown:
            raise TypeError(f"{operation} has no field {', '.join(sorted(unknown))}")
        return [option_of(fields[n], when=when, **spelled.get(n, {})) for n in names]

    def apply(fn: F) -> F:
        if not hasattr(fn, "__click_params__"):
            fn.__click_params__ = []  # type: ignore[attr-defined]
        fn.__click_params__.append(_Deferred(make))  # type: ignore[attr-defined]
        return fn

    return apply


def config_of(ctx: click.Context) -> Config:
    """The configuration of this call, loaded once (``--config``, else the defaults' search)."""
    from daemon.common.config import load_config  # pydantic: only for the commands that read the configuration

    obj = ctx.ensure_object(dict)
    if "config" not in obj:
        obj["config"] = load_config(obj.get("config_path"))
    return obj["config"]


def front_config(ctx: click.Context) -> Config | FrontConfig:
    """The configuration's resolved paths, for a call that only talks to a running daemon or reads
    files at those paths (an agent's workspace, its index).

    From the validated-configuration cache (daemon/common/config_cache.py) when the file,
    its path, the environment and the code are those of an earlier full validation;
    else validated in full here (same errors as :func:`config_of`) and recorded.
    A file that no longer validates (a typo the daemon refused on SIGHUP, running on) gives the
    paths of its last good version, the running daemon's, and the call says on stderr that the
    file on disk is broken, and why (file, key, line): see :func:`paths_config`.
    Only ``.paths`` and ``.source`` may be read from what this returns: anything
    else (a daemon that is down, another layer) goes through :func:`config_of`.
    """
    from daemon.common.config_cache import FrontConfig  # the standard library only

    obj = ctx.ensure_object(dict)
    if "config" in obj:
        return obj["config"]
    if "front_config" not in obj:
        config, broken = paths_config(obj.get("config_path"))
        if not isinstance(config, FrontConfig):
            obj["config"] = config  # validated in full: config_of() reuses it
            return config
        obj["front_config"] = config
        if broken is not None:
            say_config_broken(broken)
    return obj["front_config"]


def paths_config(config_path: Path | None) -> tuple[Config | FrontConfig, str | None]:
    """The configuration's paths for a front call, and why the file on disk does not load, if it does not.

    The cache's entry for these very bytes; else the file validated in full (and recorded); else, when
    it does not validate but an earlier version of the same file did (same path, environment, user
    and code), the paths of that last good version with the full reader's error (file, key, line);
    else that error is raised, as :func:`config_of` raises it.
    """
    from daemon.common import config_cache

    raw = config_cache.read_config_bytes(config_path)
    cached = config_cache.load(raw) if raw is not None else None
    if cached is not None:
        return cached, None  # the usual case: no pydantic, no YAML (a front call's CPU is mostly imports)
    from daemon.common.config import load_config, parse_config

    if raw is None:
        return load_config(config_path), None
    try:
        config = parse_config(raw.raw.decode("utf-8"), raw.path)  # the very bytes the key hashes
    except (UnicodeDecodeError, ValueError) as exc:
        last_good = config_cache.last_good(raw)
        if isinstance(exc, UnicodeDecodeError):
            try:  # the full reader names the line of the bad byte
                load_config(raw.path)
            except ValueError as named:
                exc = named
        if last_good is None:
            raise exc from None
        return last_good, str(exc)
    config_cache.store(raw, config.paths)
    return config, None


def say_config_broken(why: str) -> None:
    """On stderr: the configuration file on disk does not load, so this call uses its last good version."""
    click.echo(
        escaped(
            f"memstrata: the configuration file does not load, so this uses the paths of its last good version "
            f"(those the running daemon uses; fix the file, then reload: systemctl reload memstrata):\n{why}",
            keep_newlines=True,
        ),
        err=True,
    )


def echo_json(data: object) -> None:
    """``data`` as indented JSON: exact values, every control character a ``\\u`` escape (daemon/common/terminal.py)."""
    click.echo(json_text(data, indent=2))


def echo_text(line: str = "", *, err: bool = False, nl: bool = True) -> None:
    """One line of a command's text output with every control character of it escaped: what an agent
    wrote (a name, a memory, metadata) never drives the operator's terminal (daemon/common/terminal.py)."""
    click.echo(escaped(line), err=err, nl=nl)


class Report:
    """What a setting-up command did (``init``, ``agent add``, ``agent token``): one line per step,
    or with ``--json`` one object whose ``steps`` are those lines as ``{"action", "what"}``."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.steps: list[dict[str, str]] = []

    def say(self, line: str) -> None:
        """One step, written as the text output shows it: its first word is the action."""
        if not self.as_json:
            click.echo(escaped(line, keep_newlines=True))  # the blank line before "next:" is ours
            return
        action, _, what = line.strip().partition(" ")
        self.steps.append({"action": action, "what": what.strip()})

    def done(self, **summary: object) -> None:
        if self.as_json:
            echo_json({**summary, "steps": self.steps})


def _agent_here(ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    """``--agent``, else the agent whose workspace holds the current directory (the deepest one:
    spoke workspaces may lie inside the main one), else a usage error that says so."""
    if value is not None:
        return value
    from daemon.common.workspaces import discover

    here = Path.cwd().resolve()
    agents = discover(front_config(ctx))
    holding = [a for a in agents if here.is_relative_to(a.workspace.resolve())]
    if holding:
        return max(holding, key=lambda a: len(a.workspace.resolve().parts)).id
    known = ", ".join(a.id for a in agents) or "none"
    raise UsageFailure(f"give --agent ID: {here} is in no agent's workspace (known agents: {known})", "no_agent")


class AgentOption(click.Option):
    """``--agent``: optional on the command line, yet never unset (``always_resolved``): its
    callback gives the current workspace's agent or fails."""

    always_resolved = True


agent_option = click.option(
    "--agent",
    "agent_id",
    cls=AgentOption,
    metavar="ID",
    callback=_agent_here,
    help="Agent id (main, or a spoke; default: the agent whose workspace holds the current directory).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (errors too).")


class QueryRefusedError(UsageFailure):
    """A query over the documented limit: a usage error (exit 2), said in one line."""

    code = "query_too_long"


def request_failed(exc: Exception) -> click.ClickException:
    """The daemon's refusal as one line; a query it found too long (413) or a value it cannot use
    (400) is a usage error, anything else a runtime failure (its HTTP status in the code)."""
    status = getattr(exc, "status", None)
    if status == 413:
        return QueryRefusedError(str(exc))
    if status == 400:
        return UsageFailure(str(exc), "invalid_request")
    return Failure(str(exc), f"http_{status}" if status else None)


def placement(memory: Mapping[str, Any]) -> str:
    """Where a memory lives, as every listing shows it: ``public``, ``private`` or ``project:ID``."""
    return memory["visibility"] + (f":{memory['project_id']}" if memory.get("project_id") else "")


def lifecycle_note(memory: Mapping[str, Any]) -> str:
    """What a listing adds about a memory's validity (nothing for a plain valid one)."""
    state = memory.get("state")
    if state == "superseded":
        by = memory.get("superseded_by")
        return f", SUPERSEDED {(memory.get('invalid_at') or '')[:10]}" + (f" by {by}" if by else "")
    if state == "archived":
        return f", ARCHIVED {(memory.get('archived') or '')[:10]}"
    return ""


def use_note(memory: Mapping[str, Any]) -> str:
    """Trust, use and importance, as a listing shows them (what ``--json`` has in full)."""
    note = f", trust {memory.get('trust') or 'medium'}"
    if memory.get("access_count"):
        note += f", used {memory['access_count']}x"
    importance = memory.get("importance")
    if isinstance(importance, int | float) and importance < 0.995:
        note += f", importance {importance:.2f}"
    return note


def degraded_note(answer: Mapping[str, Any]) -> str | None:
    """A degraded answer's note, with its age when a spoke's replica of the hub answered (None: not degraded)."""
    if not answer.get("degraded"):
        return None
    age = answer.get("replica_age_s")
    return f"degraded: {answer.get('reason')}" + (f"; the replica is {age} s old" if age is not None else "")


def conversation_failed(exc: Exception) -> click.ClickException:
    from daemon.front.daemon_client import DaemonUnavailableError

    if isinstance(exc, DaemonUnavailableError):
        return UnreachableFailure(f"{exc}: conversation memory is served by the daemon (`memstrata run`)")
    return request_failed(exc)
