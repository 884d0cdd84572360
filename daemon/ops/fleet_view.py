"""The fleet at a glance, on the hub (issue 47 item 5): every host's last report, read from the fleet's repositories.

Each host pushes ``refs/memstrata/<host>/status`` (layers/daily/git/host_report.py): a line of commits
holding ``status.json`` (its version, its clock, per agent the last pushed commit and the backlog).  The
hub holds them all on its own disk: its own report in the top repository (its ``git.remote`` is that
path: how the hub knows it is the hub), every other host's in ``<top>/hosts/<host>.git``
(daemon/ops/fleet_hosts.py).  This module reads them and says, for each host:

- when the hub last *received* its report: the hub's reflog of the status ref (``core.logAllRefUpdates
  =always``, which ``memstrata fleet init-remote`` sets on every repository), the hub's clock, never the
  host's (which may be wrong; when the two disagree by more than :data:`CLOCK_SKEW_S`, both are shown);
- SILENT when that is longer ago than ``fleet.silent_after_s``; "never heard from" for a host that
  has a repository (``authorize`` made it) and no report;
- its version, its agents, per agent its backlog and refused refs (as it reported them) and the last
  pushed commit, with when the hub received it (the reflog of the agent's ref, the hub's clock again).

A report is another host's data, and a host's key can push anything to its own refs: it is read with a
size cap (:data:`MAX_REPORT_BYTES`, checked before the content is read), as JSON only, every value of
the expected type and shape (ids by the agent id pattern, commits as hex, refs under the host's own
prefix) or left out; a report that is not that is "report unreadable" and the host is still listed.
Strings are escaped for the terminal where they are shown (daemon/common/terminal.py).

Reading is bounded and cheap: at most :data:`MAX_HOSTS` hosts and :data:`MAX_AGENTS` agents each, one
``git for-each-ref`` per host, the reflogs' last lines read from their files, a report's blob read only
when its commit changed.  :class:`FleetView` keeps the last reading for :data:`CACHE_S` seconds and reads
again on a thread of its own, so ``/metrics`` never waits on git (it takes the last reading as it is).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from daemon.ops import fleet_gate, fleet_hosts, fleet_remote
from layers.daily.git.host_report import FILE as REPORT_FILE
from layers.daily.git.host_report import report_ref

log = logging.getLogger(__name__)

CACHE_S = 5.0  # a reading of the repositories serves this long
MAX_HOSTS = 256  # hosts read; the rest are counted (hosts_left_out)
MAX_AGENTS = 256  # agents of one report read; the rest are counted (agents_left_out)
MAX_REPORT_BYTES = 256 * 1024  # a status.json larger than this is not read ("report unreadable")
MAX_VERSION_CHARS = 64
TAIL_BYTES = 8192  # of a reflog, enough for its last line
CLOCK_SKEW_S = 120.0  # the host's own time shown beside the hub's when they differ by more
GIT_TIMEOUT_S = 30.0

SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
AGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")  # protocol/vocabulary.py's AGENT_ID_PATTERN
HUB_HINT = (
    "status --fleet runs on the hub: the host where memstrata fleet init-remote made the fleet's repository "
    "(its gate names it), or whose git.remote is that repository's path"
)


class NotTheHub(Exception):
    """This host cannot read the fleet: its git.remote is not the path of a top repository."""


class ReportUnreadable(ValueError):
    """A host's status.json that is not what a memstrata host writes (said as the host's problem)."""


# ---------------------------------------------------------------- where the fleet is


def top_of(remote: str | None, gate: Path = fleet_remote.GATE) -> Path:
    """The fleet's top repository: ``git.remote`` when it is its path on this machine (``/srv/…``,
    ``file:///srv/…``), else the one the installed gate serves (``memstrata fleet init-remote`` wrote
    it there: a hub whose own daemon pushes through ssh like the spokes); NotTheHub otherwise, saying why."""
    why = []
    path = (remote or "")[len("file://") :] if (remote or "").startswith("file://") else remote or ""
    if not remote:
        why.append("no git.remote")
    elif not path.startswith("/"):
        why.append("git.remote is a URL")
    elif (Path(path) / "objects").is_dir() and (Path(path) / fleet_gate.HOSTS).is_dir():
        return Path(path)
    else:
        why.append(f"git.remote {path} is not one (no hosts/ in it: memstrata fleet init-remote {path})")
    try:
        return fleet_remote.served_by(gate)
    except fleet_remote.RemoteError as exc:
        why.append(str(exc) if gate.exists() else f"no gate at {gate}")
    raise NotTheHub(f"{HUB_HINT}; here: {'; '.join(why)}")


# ---------------------------------------------------------------- what the repositories say


@dataclass(frozen=True)
class Update:
    """A ref's last update as the hub's reflog has it: the commit, and when (the hub's clock)."""

    sha: str
    at: float


def last_update(git_dir: Path, ref: str) -> Update | None:
    """The last line of ``ref``'s reflog in ``git_dir`` (None without one, or one git did not write)."""
    path = git_dir / "logs" / ref
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        os.lseek(fd, max(0, size - TAIL_BYTES), os.SEEK_SET)
        tail = os.read(fd, TAIL_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = tail.rstrip(b"\n").split(b"\n")
    head = lines[-1].split(b"\t", 1)[0].decode("ascii", errors="replace")
    # "<old> <new> <name> <email> <seconds> <zone>": the name may hold spaces, the rest does not
    parts, rest = head.split(" ", 2), head.rsplit(" ", 2)
    if len(parts) < 3 or len(rest) < 3 or not SHA.match(parts[1]) or not rest[1].isdigit():
        return None
    return Update(parts[1], float(rest[1]))


def blob(git_dir: Path, commit: str, path: str, max_bytes: int) -> bytes | None:
    """The file ``path`` of ``commit`` in ``git_dir`` (None when it is not there); ReportUnreadable when
    it is larger than ``max_bytes`` (its size is read first: a large blob is never read)."""
    if not SHA.match(commit) or not re.fullmatch(r"[A-Za-z0-9._-]+", path):
        raise ValueError(f"blob: {commit!r}:{path!r}")
    argv = ["git", "-c", f"safe.directory={git_dir}", "--git-dir", str(git_dir), "cat-file", "--batch"]
    env = {**os.environ, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"}
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        timer = threading.Timer(GIT_TIMEOUT_S, proc.kill)
        timer.start()
        try:
            proc.stdin.write(f"{commit}:{path}\n".encode())
            proc.stdin.close()
            header = proc.stdout.readline(200).decode("ascii", errors="replace").split()
            if len(header) != 3 or header[1] != "blob" or not header[2].isdigit():
                return None  # "<name> missing", or not a file
            size = int(header[2])
            if size > max_bytes:
                proc.kill()
                raise ReportUnreadable(f"{size} bytes, over the cap of {max_bytes}")
            content = proc.stdout.read(size)
            proc.kill()
        finally:
            timer.cancel()
    if len(content) != size:
        raise ReportUnreadable("git did not give the whole file")
    return content


# ---------------------------------------------------------------- a host's report, defensively


@dataclass(frozen=True)
class AgentReport:
    id: str
    behind_commits: int | None
    behind_lost: int | None
    last_pushed: str | None
    remote_ref: str | None
    refused: int | None


@dataclass(frozen=True)
class Report:
    """What a host's status.json holds, each value checked (None: absent or not of its type)."""

    time: float | None
    version: str | None
    agents: tuple[AgentReport, ...]
    agents_left_out: int


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def _sha(value: object) -> str | None:
    return value if isinstance(value, str) and SHA.match(value) else None


def _time(value: object) -> float | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


def parse_report(raw: bytes, host: str) -> Report:
    """``raw`` (a status.json) read as a memstrata host writes it; ReportUnreadable when it is not JSON,
    not an object, or names another host.  Values of the wrong type or shape are left out."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ReportUnreadable(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ReportUnreadable(f"not a JSON object but {type(data).__name__}")
    if data.get("host") != host:
        named = data.get("host")
        raise ReportUnreadable(f"it names host {named[:64]!r}" if isinstance(named, str) else "it names no host")
    version = data.get("version")
    agents_in = data.get("agents")
    agents: list[AgentReport] = []
    left_out = 0
    if isinstance(agents_in, dict):
        prefix = f"refs/memstrata/{host}/"
        for agent_id, entry in agents_in.items():
            if len(agents) >= MAX_AGENTS or not AGENT_ID.match(agent_id) or not isinstance(entry, dict):
                left_out += 1
                continue
            ref = entry.get("remote_ref")
            line = isinstance(ref, str) and re.fullmatch(re.escape(f"{prefix}{agent_id}/line/") + "[0-9]{1,9}", ref)
            agents.append(
                AgentReport(
                    agent_id,
                    _count(entry.get("behind_commits")),
                    _count(entry.get("behind_lost")),
                    _sha(entry.get("last_pushed")),
                    ref if line else None,
                    _count(entry.get("refused")),
                )
            )
    elif agents_in is not None:
        raise ReportUnreadable(f"its agents are not an object but {type(agents_in).__name__}")
    return Report(
        _time(data.get("time")),
        version[:MAX_VERSION_CHARS] if isinstance(version, str) else None,
        tuple(sorted(agents, key=lambda a: a.id)),
        left_out,
    )


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# ---------------------------------------------------------------- one reading of the fleet


@dataclass(frozen=True)
class HostReading:
    """One host as its repository says it: its report's commit, when the hub received it, the report."""

    host: str
    repository: Path
    commit: str | None  # the status ref's commit (None: never heard from)
    heard_at: float | None  # the hub's reflog of the status ref
    report: Report | None
    error: str | None  # why the report is unreadable (or the repository)
    pushed_at: dict[str, float] = field(default_factory=dict)  # agent → when the hub received its ref's commit
    on_hub: dict[str, str] = field(default_factory=dict)  # agent → the commit of its ref on the hub


@dataclass(frozen=True)
class Reading:
    top: Path
    hub: str
    hosts: tuple[HostReading, ...]
    hosts_left_out: int
    read_at: float


class Reader:
    """Reads the fleet's repositories; remembers each host's parsed report by its commit."""

    def __init__(self, top: Path, hub: str) -> None:
        self.top = top
        self.hub = hub
        self._parsed: dict[str, tuple[str, Report | None, str | None]] = {}  # host → (commit, report, error)

    def read(self) -> Reading:
        names = fleet_hosts.host_names(self.top)
        others = [name for name in names if name != self.hub]
        left_out = max(0, len(others) + 1 - MAX_HOSTS)
        hosts = [self._host(self.hub, hub=True)]
        hosts += [self._host(name) for name in others[: MAX_HOSTS - 1]]
        return Reading(self.top, self.hub, tuple(hosts), left_out, time.time())

    def _host(self, host: str, hub: bool = False) -> HostReading:
        """``host``'s reading from its repository (the hub's: from the top, else its own under hosts/)."""
        own = fleet_hosts.host_repository(self.top, host)
        repositories = [self.top, own] if hub else [own]
        ref = report_ref(host)
        found: tuple[Path, dict[str, str]] | None = None
        for repository in repositories:
            if not repository.is_dir():
                continue
            try:
                refs = fleet_hosts.refs(repository, f"refs/memstrata/{host}/")
            except (fleet_hosts.ReadError, OSError, subprocess.SubprocessError) as exc:
                return HostReading(host, repository, None, None, None, f"repository unreadable: {exc}")
            if ref in refs:
                found = (repository, refs)
                break
        if found is None:
            return HostReading(host, repositories[-1] if not hub else self.top, None, None, None, None)
        repository, refs = found
        commit = refs[ref]
        update = last_update(repository, ref)
        report, error = self._report(host, repository, commit)
        pushed_at: dict[str, float] = {}
        on_hub: dict[str, str] = {}
        for agent in report.agents if report else ():
            if agent.remote_ref and agent.remote_ref in refs:
                on_hub[agent.id] = refs[agent.remote_ref]
                moved = last_update(repository, agent.remote_ref)
                if moved is not None and moved.sha == refs[agent.remote_ref]:
                    pushed_at[agent.id] = moved.at
        heard = update.at if update is not None else None
        return HostReading(host, repository, commit, heard, report, error, pushed_at, on_hub)

    def _report(self, host: str, repository: Path, commit: str) -> tuple[Report | None, str | None]:
        known = self._parsed.get(host)
        if known is not None and known[0] == commit:
            return known[1], known[2]
        report: Report | None = None
        error: str | None = None
        try:
            raw = blob(repository, commit, REPORT_FILE, MAX_REPORT_BYTES)
            if raw is None:
                error = f"report unreadable: no {REPORT_FILE} in its commit"
            else:
                report = parse_report(raw, host)
        except ReportUnreadable as exc:
            error = f"report unreadable: {exc}"
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            error = f"report unreadable: {exc}"
        self._parsed[host] = (commit, report, error)
        return report, error


# ---------------------------------------------------------------- the document


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds") if ts is not None else None


def document(reading: Reading, silent_after_s: float, now: float | None = None) -> dict[str, Any]:
    """``status --fleet --json``: the reading as of ``now`` (ages and SILENT are the hub's clock's)."""
    now = time.time() if now is None else now
    hosts = []
    for h in reading.hosts:
        ago = None if h.heard_at is None else round(max(0.0, now - h.heard_at), 1)
        state = "never_heard" if h.commit is None else "silent" if ago is None or ago > silent_after_s else "ok"
        r = h.report
        skew = None if r is None or r.time is None or h.heard_at is None else round(r.time - h.heard_at, 1)
        agents = [
            {
                "id": a.id,
                "behind_commits": a.behind_commits,
                "behind_lost": a.behind_lost,
                "last_pushed": a.last_pushed,
                "on_hub": h.on_hub.get(a.id),
                "pushed_at": iso(h.pushed_at.get(a.id)),
                "remote_ref": a.remote_ref,
                "refused": a.refused,
            }
            for a in (r.agents if r else ())
        ]
        hosts.append(
            {
                "host": h.host,
                "hub": h.host == reading.hub,
                "state": state,
                "silent": state != "ok",
                "heard_at": iso(h.heard_at),
                "heard_ago_s": ago,
                "reported_at": iso(r.time) if r else None,
                "clock_skew_s": skew,
                "version": r.version if r else None,
                "report": h.commit,
                "error": h.error,
                "agents": agents,
                "agents_left_out": r.agents_left_out if r else 0,
            }
        )
    return {
        "top": str(reading.top),
        "hub": reading.hub,
        "silent_after_s": silent_after_s,
        "read_at": iso(reading.read_at),
        "now": iso(now),
        "counts": {
            "hosts": len(hosts),
            "silent": sum(1 for h in hosts if h["state"] == "silent"),
            "never_heard": sum(1 for h in hosts if h["state"] == "never_heard"),
            "unreadable": sum(1 for h in hosts if h["error"]),
        },
        "hosts": hosts,
        "hosts_left_out": reading.hosts_left_out,
    }


# ---------------------------------------------------------------- the hub's daemon


class FleetView:
    """The last reading of the fleet, read again on a thread when older than :data:`CACHE_S`.

    ``document(wait_s)`` waits at most ``wait_s`` for a fresh reading (``status --fleet``: a few
    seconds; ``/metrics``: none, the last reading as it is).  NotTheHub when ``remote`` is not a top.
    """

    def __init__(
        self, remote: str | None, hub: str, silent_after_s: float, cache_s: float = CACHE_S, gate: Path | None = None
    ) -> None:
        self.remote = remote
        self.gate = gate or fleet_remote.GATE
        self.hub = hub
        self.silent_after_s = silent_after_s
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._reading: Reading | None = None
        self._failure: Exception | None = None
        self._fresh_at = 0.0  # monotonic: when the last reading (or failure) was made
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: Reader | None = None

    def document(self, wait_s: float) -> dict[str, Any] | None:
        """The fleet document (None when nothing was read yet and ``wait_s`` ran out); NotTheHub."""
        with self._lock:
            stale = time.monotonic() - self._fresh_at > self.cache_s or (self._reading is None and not self._failure)
            if stale and self._thread is None:
                self._done.clear()
                self._thread = threading.Thread(target=self._read, name="fleet-view", daemon=True)
                self._thread.start()
            done = self._done
        if stale and wait_s > 0:
            done.wait(wait_s)
        with self._lock:
            reading, failure = self._reading, self._failure
        if failure is not None:
            raise failure
        return None if reading is None else document(reading, self.silent_after_s)

    def _read(self) -> None:
        reading: Reading | None = None
        failure: Exception | None = None
        try:
            top = top_of(self.remote, self.gate)
            if self._reader is None or self._reader.top != top:
                self._reader = Reader(top, self.hub)
            reading = self._reader.read()
        except NotTheHub as exc:
            failure = exc
        except Exception as exc:  # a bug, or the disk: logged; the last reading kept, else raised to the caller
            log.exception("fleet view: reading the fleet's repositories failed")
            failure = None if self._reading is not None else exc
        with self._lock:
            if reading is not None or failure is not None:
                self._reading = reading if reading is not None else self._reading
                self._failure = failure
            self._fresh_at = time.monotonic()
            self._thread = None
            self._done.set()


def survey(remote: str | None, hub: str, silent_after_s: float) -> dict[str, Any]:
    """One reading, here and now (the front with the daemon down): the document; NotTheHub."""
    return document(Reader(top_of(remote), hub).read(), silent_after_s)
