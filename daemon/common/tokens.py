"""Agent tokens: how a caller on the socket proves which agent it is.

Every agent has a random token in its workspace at ``.memstrata/token`` (0600,
git-ignored); the daemon keeps only its SHA-256 in ``state_dir/tokens.json``.
The administrator's token lives in ``state_dir/admin.token`` (0600): whoever can
read the state directory (root, or its owner) may act for any agent.  The CLI
and the daemon both write ``tokens.json`` (under a lock, atomically); the daemon
re-reads it when it changes, so ``memstrata agent add`` works while it runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

from daemon.common.domain_errors import StateUnreadableError
from layers.common import safefs
from layers.common.fsutil import atomic_write

TOKENS_FILE = "tokens.json"
ADMIN_TOKEN_FILE = "admin.token"
WORKSPACE_TOKEN = Path(".memstrata") / "token"
ADMIN = "admin"  # what identify() returns for the administrator's token


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _write_secret(path: Path, text: str) -> None:
    """Write a 0600 file of the daemon's own (state directory)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(path, text, mode=0o600)


def _write_workspace_token(workspace: Path, text: str) -> None:
    """Write ``.memstrata/token`` (0600 in a 0700 directory), handed to the workspace's owner.

    The workspace is the agent's: ``.memstrata`` or ``token`` may be a symlink to
    anywhere, so both are opened without following symlinks and a symlink is
    refused (:class:`UnsafePathError`); only what is created here is chowned, and
    only when the owner differs; a refused chown (EPERM) is not fatal.
    """
    owner = safefs.owner_of(workspace)
    os.close(safefs.open_dir(workspace, WORKSPACE_TOKEN.parent.as_posix(), create=True, mode=0o700, owner=owner))
    safefs.write_atomic(workspace, WORKSPACE_TOKEN.as_posix(), text.encode(), mode=0o600, owner=owner)


def read_token(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        return None


def read_workspace_token(workspace: Path) -> str | None:
    """The token in a workspace, read without following symlinks (a symlink raises UnsafePathError)."""
    try:
        data = safefs.read_bytes(workspace, WORKSPACE_TOKEN.as_posix())
    except (PermissionError, NotADirectoryError):
        return None
    return (data.decode("utf-8", errors="replace").strip() or None) if data is not None else None


class TokenOfAnotherAgentError(safefs.UnsafePathError):
    """The workspace's ``.memstrata/token`` is another agent's valid token: it is never replaced.

    A token file is created for a new workspace only; finding another agent's there means two ids
    reach one workspace (issue 44), and replacing it would hand that agent's identity over."""


class TokenStore:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / TOKENS_FILE
        self.admin_path = state_dir / ADMIN_TOKEN_FILE
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._digests: dict[str, str] = {}
        self._admin_digest: str | None = None

    # ------------------------------------------------------------ writing (CLI and daemon)

    def _locked_update(self, agent: str, digest: str) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        with open(self.state_dir / (TOKENS_FILE + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self._read_file()
            current[agent] = digest
            _write_secret(self.path, json.dumps(current, indent=1, sort_keys=True))

    def _holder(self, agent: str, workspace: Path, known: dict[str, str]) -> None:
        """Refuse when the token already in ``workspace`` is a valid token of an agent other than ``agent``."""
        token = read_workspace_token(workspace)
        if not token:
            return
        digest = _digest(token)
        for other, theirs in known.items():
            if other != agent and hmac.compare_digest(digest, theirs):
                raise TokenOfAnotherAgentError(workspace, WORKSPACE_TOKEN.as_posix(), f"holds agent {other}'s token")

    def issue(self, agent: str, workspace: Path) -> str:
        """A new token for ``agent``, written into its workspace; the old one stops working.

        Never over another agent's valid token (:class:`TokenOfAnotherAgentError`)."""
        self._holder(agent, workspace, self._read_file())
        token = secrets.token_urlsafe(32)
        _write_workspace_token(workspace, token + "\n")
        self._locked_update(agent, _digest(token))
        return token

    def ensure(self, agent: str, workspace: Path) -> bool:
        """Give ``agent`` a token unless its workspace already holds a valid one; True when issued."""
        token = read_workspace_token(workspace)
        if token and self._read_file().get(agent) == _digest(token):
            return False
        self.issue(agent, workspace)
        return True

    def ensure_admin(self) -> None:
        if read_token(self.admin_path) is None:
            _write_secret(self.admin_path, secrets.token_urlsafe(32) + "\n")

    # ------------------------------------------------------------ checking (daemon)

    def _read_file(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (ValueError, OSError) as exc:
            raise StateUnreadableError(
                f"{self.path} is unreadable ({exc}); `memstrata agent token ID` rewrites it"
            ) from None
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
            seen = (st.st_mtime, st.st_size)
        except FileNotFoundError:
            seen = (0.0, 0)
        with self._lock:
            if seen != self._seen:
                self._digests = self._read_file()
                self._seen = seen
            if self._admin_digest is None:
                admin = read_token(self.admin_path)
                self._admin_digest = _digest(admin) if admin else None

    def identify(self, token: str | None) -> str | None:
        """The agent id a token belongs to, :data:`ADMIN`, or None."""
        if not token:
            return None
        self._refresh()
        digest = _digest(token)
        if self._admin_digest and hmac.compare_digest(digest, self._admin_digest):
            return ADMIN
        for agent, known in self._digests.items():
            if hmac.compare_digest(digest, known):
                return agent
        return None


TOKEN_ENV = "MEMSTRATA_TOKEN"


def _agent_token(workspace: Path) -> str | None:
    try:
        return read_workspace_token(workspace)
    except safefs.UnsafePathError:
        return None


def caller_token(state_dir: Path, workspace: Path | None = None) -> str | None:
    """The token a local client presents: ``$MEMSTRATA_TOKEN``, else the administrator's
    (when this user can read it), else the agent's own from its workspace."""
    return (
        os.environ.get(TOKEN_ENV)
        or read_token(state_dir / ADMIN_TOKEN_FILE)
        or (_agent_token(workspace) if workspace else None)
    )


def own_token(state_dir: Path, agent_id: str, workspace: Path) -> tuple[str | None, str | None]:
    """(token, None) for a client that must act as ``agent_id`` only, or (None, why there is none).

    What an MCP server or another per-agent front presents: ``$MEMSTRATA_TOKEN``, else the
    agent's own ``.memstrata/token`` (read without following symlinks), as the skill finds it.
    Never the administrator's, which root can read and :func:`caller_token` would fall back
    to: with it the model behind one agent could read and change every agent's memory.  A
    ``$MEMSTRATA_TOKEN`` that holds the administrator's token is refused for the same reason.
    """
    never_admin = "this server never uses the administrator's token (it would act for every agent)"
    given = os.environ.get(TOKEN_ENV, "").strip()
    if given:
        admin = read_token(state_dir / ADMIN_TOKEN_FILE)
        if admin and hmac.compare_digest(given.encode(), admin.encode()):
            return None, (
                f"${TOKEN_ENV} holds the administrator's token and {never_admin}: set it to agent "
                f"{agent_id!r}'s own token (the contents of {workspace / WORKSPACE_TOKEN}) or leave it unset"
            )
        return given, None
    path = workspace / WORKSPACE_TOKEN
    token = None
    try:
        data = safefs.read_bytes(workspace, WORKSPACE_TOKEN.as_posix())
        token = data.decode("utf-8", errors="replace").strip() if data is not None else None
        state = "does not exist" if data is None else None if token else "is empty"
    except safefs.UnsafePathError as exc:
        state = f"was refused ({exc.why}; a token is never read through a symlink)"
    except (PermissionError, NotADirectoryError) as exc:
        state = f"cannot be read ({exc.strerror})"
    if state is None:
        return token, None
    return None, (
        f"no token for agent {agent_id!r}: ${TOKEN_ENV} is not set and {path} {state}. The daemon writes "
        f"that file when it starts, and `memstrata agent token {agent_id}` issues a new one; {never_admin}"
    )
