"""Consolidation of the L4 store, wherever the store is opened: reports, run ids, undo.

Like cleanup (daemon/ops/maintenance.py) this runs inside the daemon, on a store whose calls go
through its store thread, or in the CLI on the store it opened itself.  Every run writes its
report to ``state_dir/consolidation/<run id>.json`` (0600, the directory 0700: it holds the
payloads undo puts back, texts of private memories among them): first the plan, then, before
anything changes, the payloads it is about to change, then what they became.  One line per run
goes to the audit log (``memory-consolidation-YYYY-MM-DD.log``), with figures and never a text.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from daemon.common.audit import audit_log
from daemon.common.config import Config
from daemon.common.domain_errors import ConflictError, InvalidRequestError, NotFoundError
from daemon.common.settings import guard_from
from layers.common.fsutil import atomic_write
from layers.conversation.consolidation import nightly as consolidation
from layers.conversation.consolidation.judge import LlmJudge
from layers.conversation.consolidation.nightly import ConsolidationStore, Progress
from layers.conversation.consolidation.plan import Thresholds
from protocol.operations import Consolidate

RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
DEFAULT_MAX_SHARE = Thresholds().max_share
LISTED = 20  # runs `consolidate --list` shows


@dataclass(frozen=True)
class ConsolidateOptions:
    """A consolidation as the daemon runs it: the operation's fields (protocol.operations.Consolidate) with
    the daemon's default share (layers' Thresholds) and its rules of combination (:meth:`check`)."""

    execute: bool = False
    agent: str | None = None
    max_share: float = DEFAULT_MAX_SHARE
    undo: str | None = None  # a run id: put back what that run changed
    force: bool = False  # undo: also over changes made since the run

    @classmethod
    def of(cls, o: Consolidate) -> ConsolidateOptions:
        """The operation (from the route or the CLI) with the daemon's defaults; bad combinations are a 400."""
        options = cls(
            execute=bool(o.execute),
            agent=o.agent,
            max_share=DEFAULT_MAX_SHARE if o.max_share is None else float(o.max_share),
            undo=o.undo,
            force=bool(o.force),
        )
        options.check()
        return options

    def check(self) -> None:
        if not 0 < self.max_share <= 1:
            raise InvalidRequestError("max_share must be above 0 and at most 1 (a share of an agent's memories)")
        if self.undo is not None:
            run_id_checked(self.undo)
            if self.execute or self.agent:
                raise InvalidRequestError("undo takes a run id alone (no execute, no agent)")
        elif self.force:
            raise InvalidRequestError("force applies to undo only")


def reports_dir(config: Config) -> Path:
    return config.paths.state_dir / "consolidation"


def run_id_checked(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise InvalidRequestError(
            "undo needs a run id as consolidation prints it (YYYYMMDDTHHMMSSZ-xxxxxx; `memstrata consolidate --list`)"
        )
    return run_id


def new_run_id(now: datetime | None = None) -> str:
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{moment:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def report_path(config: Config, run_id: str) -> Path:
    return reports_dir(config) / f"{run_id_checked(run_id)}.json"


def save_report(path: Path, report: dict) -> None:
    """Atomically (a crash leaves the last whole report), private to root."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    atomic_write(path, json.dumps(report, ensure_ascii=False, indent=1, sort_keys=False), mode=0o600)


def load_report(config: Config, run_id: str) -> dict:
    path = report_path(config, run_id)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise NotFoundError(f"no consolidation run {run_id} (no report at {path})") from None
    except (OSError, ValueError) as exc:
        raise InvalidRequestError(f"the report of run {run_id} cannot be read ({exc}): {path}") from None


def judge_of(llm: dict | None) -> LlmJudge | None:
    """``conversation.llm`` as the judge, its key from the environment variable it names (store settings)."""
    if not llm:
        return None
    return LlmJudge(llm["base_url"], llm["model"], llm.get("api_key") or None)


def l4_embedder(config: Config):
    """The embedder L4 writes with, for a run outside the daemon that may write summaries."""
    from daemon.local.embedding import conversation_embedder, make_embedder

    return conversation_embedder(config, make_embedder(config))


def consolidate(
    config: Config,
    store: ConsolidationStore,
    options: ConsolidateOptions,
    llm: dict | None,
    progress: Progress = lambda phase, done, total: None,
) -> dict:
    """Plan, or plan and apply, one run; returns the report's summary (``view``)."""
    options.check()
    if options.undo is not None:
        return undo(config, store, options.undo, options.force)
    run_id = new_run_id()
    path = report_path(config, run_id)
    guard = guard_from(config)

    def check_text(text: str) -> str | None:
        found = guard.scan_text(text)
        return f"it matches never_store ({', '.join(sorted({f.kind for f in found}))})" if found else None

    report = consolidation.consolidate(
        store,
        execute=options.execute,
        run_id=run_id,
        save=lambda r: save_report(path, r),
        thresholds=Thresholds(max_share=options.max_share),
        judge=judge_of(llm),
        agent=options.agent,
        check_text=check_text,
        progress=progress,
    )
    _audit(config, report)
    return view(report, path)


def undo(config: Config, store: ConsolidationStore, run_id: str, force: bool = False) -> dict:
    """Put back what run ``run_id`` changed (UndoRefused, HTTP 409, when it cannot)."""
    path = report_path(config, run_id)
    report = load_report(config, run_id)
    try:
        result = consolidation.undo(store, report, save=lambda r: save_report(path, r), force=force)
    except consolidation.UndoRefused as exc:
        raise ConflictError(str(exc)) from None
    _audit(config, report)
    return {**view(report, path), "undo": result}


def view(report: dict, path: Path) -> dict:
    """The report without the payloads (they stay in the file): what the CLI and the API show."""
    shown = {k: v for k, v in report.items() if k not in ("before", "after")}
    shown["changed"] = len(report.get("before") or {})
    shown["report"] = str(path)
    return shown


def recent(config: Config, limit: int = LISTED) -> list[dict]:
    """The newest runs' summaries (run id, mode, state, figures), newest first."""
    found: list[dict[str, Any]] = []
    folder = reports_dir(config)
    names = sorted((p.name for p in folder.glob("*.json") if RUN_ID.match(p.stem)), reverse=True)
    for name in names[:limit]:
        try:
            report = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            found.append({"run_id": name[:-5], "state": "unreadable"})
            continue
        counts = report.get("agents") or {}
        found.append(
            {
                "run_id": report.get("run_id"),
                "mode": report.get("mode"),
                "state": report.get("state"),
                "started_at": report.get("started_at"),
                "valid": report.get("valid"),
                "invalidated": sum(c.get("invalidated", 0) for c in counts.values()),
                "added": sum(c.get("added", 0) for c in counts.values()),
                "clusters": len(report.get("clusters") or []),
            }
        )
    return found


def _audit(config: Config, report: dict) -> None:
    """One line per run (and per undo): figures only, never a memory's text."""
    entry: dict[str, Any] = {
        "event": "consolidation" if report.get("state") != "undone" else "consolidation_undone",
        "run_id": report.get("run_id"),
        "mode": report.get("mode"),
        "state": report.get("state"),
        "agents": {
            name: {k: c[k] for k in ("valid", "invalidated", "added", "conflicts", "task_groups")}
            for name, c in (report.get("agents") or {}).items()
        },
        "refused": bool(report.get("refused")),
        "skipped": len(report.get("skipped") or []),
    }
    audit_log(config, prefix="memory-consolidation").write(entry)
