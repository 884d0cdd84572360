"""``memstrata status --fleet``: the fleet at a glance, on the hub (issue 47 item 5).

The document is daemon/ops/fleet_view.py's, asked of the hub's daemon (``GET /v1/admin/fleet``, the
administrator's token: root's); with the daemon down, the same module reads the repositories here.
Each host's strings come from that host's report, another machine's data: every one is escaped for
the terminal before it is shown (daemon/common/terminal.py), and ``--json`` is exact JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from daemon.common.terminal import for_terminal
from daemon.front import failures
from daemon.front.options import config_of, front_config

SKEW_SHOWN_S = 120.0  # the host's own clock shown beside the hub's when they differ by more


def fleet_document(ctx: click.Context) -> dict[str, Any]:
    """The hub daemon's fleet document, or (the daemon down) one read here; a Failure elsewhere."""
    from daemon.front.daemon_client import DaemonRequestError, DaemonUnavailableError, connect
    from protocol import operations as op

    try:
        with connect(front_config(ctx), timeout=30) as client:
            return dict(client.call(op.Fleet(), timeout=30))
    except DaemonRequestError as exc:
        code = {409: "not_the_hub", 403: "forbidden", 401: "forbidden"}.get(exc.status, "failed")
        raise failures.Failure(exc.message, code) from None
    except DaemonUnavailableError:
        pass
    from daemon.ops.fleet_view import NotTheHub, survey

    config = config_of(ctx)
    try:
        document = survey(config.git.remote, config.host_name, config.silent_after_s)
    except (NotTheHub, ValueError) as exc:
        raise failures.Failure(str(exc), "not_the_hub") from None
    except PermissionError as exc:
        raise failures.Failure(f"cannot read the fleet's repositories: {exc} (run it as root)") from None
    document["daemon"] = "not running: read from the repositories by this command"
    return document


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _since(now: str | None, then: str | None) -> float | None:
    if not now or not then:
        return None
    try:
        return max(0.0, (datetime.fromisoformat(now) - datetime.fromisoformat(then)).total_seconds())
    except ValueError:
        return None


def render(document: dict[str, Any]) -> str:
    """The text of ``status --fleet``: a summary line, then each host and its agents."""
    d = for_terminal(document)
    counts = d.get("counts") or {}
    silent_after = ago(d.get("silent_after_s")).removesuffix(" ago")
    parts = [f"{counts.get('hosts', 0)} host(s)"]
    if counts.get("silent"):
        parts.append(f"{counts['silent']} SILENT")
    if counts.get("never_heard"):
        parts.append(f"{counts['never_heard']} never heard from")
    if counts.get("unreadable"):
        parts.append(f"{counts['unreadable']} report(s) unreadable")
    lines = [f"fleet at {d.get('top')}: {', '.join(parts)} (silent after {silent_after})"]
    if d.get("daemon"):
        lines.append(f"  (daemon {d['daemon']})")
    for h in d.get("hosts") or []:
        lines += _host_lines(h, d.get("now"))
    if d.get("hosts_left_out"):
        lines.append(f"  … and {d['hosts_left_out']} more host(s), not read (the cap)")
    return "\n".join(lines) + "\n"


def _host_lines(h: dict[str, Any], now: str | None) -> list[str]:
    name = f"{h['host']}{' (hub)' if h.get('hub') and h['host'] != 'hub' else ''}"
    if h.get("state") == "never_heard":
        said = "never heard from (authorized, no report yet)"
    else:
        heard = ago(h.get("heard_ago_s"))
        said = f"SILENT: last heard {heard}" if h.get("state") == "silent" else f"heard {heard}"
        skew = h.get("clock_skew_s")
        if skew is not None and abs(skew) > SKEW_SHOWN_S:
            said += f" (its own clock said {ago(_since(now, h.get('reported_at')))})"
        if h.get("version"):
            said += f", memstrata {h['version']}"
    if h.get("error"):
        said += f"; {h['error']}"
    lines = [f"  {name:<16} {said}"]
    for a in h.get("agents") or []:
        behind = a.get("behind_commits")
        text = f"behind {behind if behind is not None else '?'}"
        if a.get("behind_lost"):
            text += f" (+{a['behind_lost']} lost)"
        if a.get("last_pushed"):
            text += f", last pushed {a['last_pushed'][:12]}"
            text += f" received {ago(_since(now, a.get('pushed_at')))}" if a.get("pushed_at") else ""
        if a.get("refused"):
            text += f", REFUSED {a['refused']} ref(s)"
        lines.append(f"      {a['id']:<20} {text}")
    if h.get("agents_left_out"):
        lines.append(f"      … {h['agents_left_out']} agent(s) left out (over the cap, or not valid)")
    replica = h.get("l4_replica")  # the hub's change feed: where this spoke's replica stood when it last asked
    if replica:
        lines.append(
            f"      L4 replica: seq {replica.get('seq', 0):,}, lag {replica.get('lag', 0):,} "
            f"(asked {ago(replica.get('asked_s_ago'))})"
        )
    return lines
