#!/usr/bin/env python3
"""Remember and recall through the memstrata daemon's conversation memory (L4).

An agent imports this module or runs it as a command; either way it talks to
the daemon over its Unix socket with the agent's own workspace token.

    python3 mem0_client.py add "部署了 Qdrant，端口 6333" --type fact
    python3 mem0_client.py search "Qdrant 端口" [--limit 5] [--json]
    python3 mem0_client.py get_all [--limit 200]
    python3 mem0_client.py status

It uses the standard library only (http.client over AF_UNIX, json, argparse),
unlike local_search.py, because it must run under whatever python3 an agent
happens to have: it never needs memstrata's virtualenv, only a running daemon.
The requests, the transport and the vocabulary are memstrata's protocol package
(``protocol/``, standard library only): a copy installed beside this file in a
workspace, else the checkout's own when this file runs from the checkout.

How it finds what it needs, so that it works from inside a workspace unconfigured:

- token: ``$MEMSTRATA_TOKEN``, else ``.memstrata/token`` in the nearest directory
  at or above the current one (or ``--workspace DIR``).  Never the administrator's.
- agent: ``--agent``, else ``$MEMSTRATA_AGENT``, else the workspace's name
  (``X-workspace`` is agent X; any other workspace is ``main``).
- socket: ``--socket``, else ``$MEMSTRATA_SOCKET``, else ``paths.socket`` of the
  configuration (``--config``, ``$MEMSTRATA_CONFIG``, else the one named in
  ``memstrata-install.json`` next to this file, else /etc/memstrata/memstrata.yaml),
  else /run/memstrata/memstrata.sock.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any


def _find_protocol() -> None:
    """Put the protocol package on the path: the copy beside this file (an installed skill), else the checkout's."""
    here = Path(__file__).resolve().parent
    for home in (here, here.parent.parent):
        if (home / "protocol" / "__init__.py").is_file():
            if str(home) not in sys.path:
                sys.path.insert(0, str(home))
            return


_find_protocol()

# ruff: noqa: E402  (the imports below need the path set above)
from protocol import locations
from protocol.client import Client
from protocol.errors import DaemonRequestError, DaemonUnavailableError, MemstrataError, SetupError, UsageError  # noqa: F401
from protocol.fields import describe
from protocol.limits import L4_PAGE, MAX_QUERY_CHARS, check_query  # noqa: F401  (importers read the limit here)
from protocol.locations import CONFIG_ENV, SOCKET_ENV, SYSTEM_CONFIG, installed_config, parse_paths_block
from protocol.mem0_shape import DEFAULT_THRESHOLD, MEM0_DATES, MEM0_FIELDS, PLACEMENT, mem0_metadata, memory_type_of
from protocol.operations import Add, Delete, DeleteAll, Get, History, List, MemorySearch, Operation, Status, Update
from protocol.vocabulary import AGENT_ID_PATTERN, DAY_PATTERN

TOKEN_ENV = "MEMSTRATA_TOKEN"
AGENT_ENV = "MEMSTRATA_AGENT"
WORKSPACE_TOKEN = Path(".memstrata") / "token"
WORKSPACE_SUFFIX = "-workspace"
MAIN_AGENT = "main"
AGENT_ID_RE = re.compile(AGENT_ID_PATTERN)
PAGE_MAX = L4_PAGE.high  # the largest page GET /v1/memories serves
DEFAULT_TIMEOUT_S = 60.0  # the first write may wait for the daemon to load its embedding model
# The errors are the protocol's (MemstrataError, SetupError, UsageError, DaemonUnavailableError), imported above.


class RequestError(DaemonRequestError):
    """The daemon answered with an error; ``status`` is the HTTP status (401 token, 403 not yours…)."""

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})"


# ------------------------------------------------------------------ discovery


def find_workspace(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding ``.memstrata/token``.

    Walking up lets an agent run this from any folder inside its workspace
    (``skills/mem0-integration``, ``memory/``…) and still be itself.
    """
    here = start.absolute()
    for directory in (here, *here.parents):
        if (directory / WORKSPACE_TOKEN).is_file():
            return directory
    return None


def read_token(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError):
        return None


def agent_of_workspace(workspace: Path) -> str:
    """``alpha-workspace`` → ``alpha``; any other workspace is the main agent's (as the daemon lays them out)."""
    name = workspace.name
    if name.endswith(WORKSPACE_SUFFIX):
        agent = name[: -len(WORKSPACE_SUFFIX)]
        if AGENT_ID_RE.match(agent):
            return agent
    return MAIN_AGENT


def parse_paths(text: str) -> dict[str, str]:
    """The ``paths:`` section: with PyYAML when this python has it, else the protocol's line reader."""
    try:
        import yaml  # optional: not part of the standard library
    except ImportError:
        return parse_paths_block(text)
    try:
        data = yaml.safe_load(text)
    except RecursionError:  # PyYAML's composer recurses per nesting level
        raise SetupError("the configuration is nested too deeply") from None
    except yaml.YAMLError as exc:
        raise SetupError(f"the configuration is not valid YAML: {exc}") from None
    paths = data.get("paths") if isinstance(data, dict) else None
    if not isinstance(paths, dict):
        return {}
    return {str(k): str(v) for k, v in paths.items() if isinstance(v, (str, int, float))}


def find_socket(explicit: str | None = None, config: str | None = None) -> Path:
    """The daemon's socket as protocol/locations.py finds it, with this copy's configuration
    (``memstrata-install.json`` beside it) and PyYAML when this python has it."""
    return locations.find_socket(explicit, config, installed_config(Path(__file__).resolve().parent), parse_paths)


def find_identity(
    agent: str | None = None, token: str | None = None, workspace: str | None = None
) -> tuple[str | None, str | None]:
    """(agent, token) from the arguments, the environment and the nearest workspace.

    Only the agent's own token is ever used, never the administrator's: an
    agent acting through this client can read and write only as itself.
    """
    start = Path(workspace) if workspace else Path.cwd()
    found = find_workspace(start)
    token = token or os.environ.get(TOKEN_ENV) or (read_token(found / WORKSPACE_TOKEN) if found else None)
    agent = agent or os.environ.get(AGENT_ENV) or (agent_of_workspace(found) if found else None)
    return agent, token


# ------------------------------------------------------------------ transport


class Transport(Client):
    """The protocol's client as the skill uses it: its errors and advice name the skill's ways out."""

    TOKEN_SOURCE = f"${TOKEN_ENV} or {WORKSPACE_TOKEN}"
    OFFLINE_ADVICE = " Meanwhile local_search.py (next to this file) searches your local index."
    REQUEST_ERROR = RequestError


# ------------------------------------------------------------------ client


class Mem0Client:
    """The daemon's conversation-memory API for one agent.

    ``Mem0Client.discover()`` finds agent, token and socket the way the command
    line does; construct it directly when you already know them.
    """

    def __init__(
        self, agent: str | None, token: str | None, socket_path: Path, timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.agent = agent
        self.token = token
        self.socket_path = Path(socket_path)
        self.timeout = timeout

    @classmethod
    def discover(
        cls,
        agent: str | None = None,
        *,
        token: str | None = None,
        socket_path: str | None = None,
        workspace: str | None = None,
        config: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> Mem0Client:
        agent, token = find_identity(agent, token, workspace)
        return cls(agent, token, find_socket(socket_path, config), timeout)

    # ------------------------------------------------------------ plumbing

    def _identity(self) -> str:
        """The agent id, after checking a token is there: say what is missing before sending anything."""
        if not self.token:
            raise SetupError(
                f"no token: run inside your workspace (it holds {WORKSPACE_TOKEN}), pass --workspace DIR, "
                f"or set ${TOKEN_ENV}"
            )
        if not self.agent:
            raise SetupError(f"which agent are you? pass --agent ID or set ${AGENT_ENV}")
        return self.agent

    def request(self, method: str, path: str, params: dict | None = None, body: dict | None = None) -> dict:
        """One HTTP exchange with the daemon; errors become :class:`MemstrataError` subclasses."""
        return Transport(self.socket_path, self.timeout, self.token).request(method, path, params, body)

    def call(self, operation: Operation) -> dict:
        """Send one of the protocol's operations (protocol/operations.py)."""
        return Transport(self.socket_path, self.timeout, self.token).call(operation)

    # ------------------------------------------------------------ the API

    def status(self) -> dict:
        """The daemon's status: is the conversation store reachable, how deep is the queue (no token
        needed), and, with this agent's token, its own workspace (never another agent's)."""
        return self.call(Status())

    def search(self, query: str, **options: Any) -> dict:
        """Conversation memories this agent may read; ``degraded: true`` means the local index answered.

        ``options`` are those of :class:`protocol.operations.MemorySearch`: ``filters`` (mem0's language)
        narrow what this agent may read, never widen it; ``threshold`` (0-1, on the daemon's relevance
        scale) leaves out weaker results; ``explain`` adds ``score_details``; ``max_tokens`` keeps the best
        results that fit in about that many tokens (the answer's ``budget``).  In the body: a URL has no room.
        """
        check_query(query)  # before anything else: too long is a usage error (exit 2), whoever asks
        return self.call(MemorySearch(self._identity(), query, **options))

    def add(self, text: str, **options: Any) -> dict:
        """Remember ``text``; ``queued: true`` means the store is down and the write will be replayed once.

        ``options`` are those of :class:`protocol.operations.Add` (``memory_type``, ``visibility``…):
        ``user_id``/``run_id``/``actor_id`` and ``metadata`` are data kept with the memory (mem0's meaning);
        ``supersedes`` names one of this agent's memories the new one replaces (kept, out of searches);
        ``trust`` (medium by default, low to say it is unverified) and ``source`` say how far to rely on it.
        """
        return self.call(Add(self._identity(), text, **options))

    def get_page(self, limit: int = 100, cursor: str | None = None, filters: dict | None = None, **shown: bool) -> dict:
        """One page of GET /v1/memories, as the daemon serves it (``filters`` as JSON in the query).

        ``shown``: ``show_superseded`` / ``show_expired`` true lists those memories too."""
        return self.call(List(self._identity(), limit=limit, cursor=cursor, filters=filters or None, **shown))

    def get_all(
        self,
        limit: int = 100,
        page_size: int = PAGE_MAX,
        filters: dict | None = None,
        show_superseded: bool = False,
        show_expired: bool = False,
    ) -> dict:
        """Every memory this agent may read, following cursors until ``limit`` are collected.

        ``truncated`` says more may exist beyond ``limit``; ``next_cursor`` resumes there.
        """
        if limit < 1 or page_size < 1:
            raise ValueError("limit and page_size must be at least 1")
        results: list[dict] = []
        cursor: str | None = None
        pages = 0
        while True:
            shown = {"show_superseded": show_superseded, "show_expired": show_expired}
            page = self.get_page(min(limit - len(results), page_size, PAGE_MAX), cursor, filters, **shown)
            pages += 1
            results.extend(page.get("results") or [])
            previous, cursor = cursor, page.get("next_cursor")
            if not cursor or len(results) >= limit or cursor == previous:
                break
        return {"results": results[:limit], "next_cursor": cursor, "truncated": cursor is not None, "pages": pages}

    def get(self, memory_id: str) -> dict:
        return self.call(Get(self._identity(), memory_id))

    def delete(self, memory_id: str) -> dict:
        """Delete one of this agent's own memories (others' are refused)."""
        return self.call(Delete(self._identity(), memory_id))


# ------------------------------------------------------------------ mem0's Memory API


class Mem0CompatError(MemstrataError, ValueError):
    """A mem0-style call memstrata cannot carry out as asked; a ValueError, as mem0's own refusals are."""


_UNSET = object()
# What memstrata reads from mem0's ``metadata`` on add, and from ``filters`` on search/get_all.
ADD_METADATA = (*PLACEMENT, "expiration_date")


def mem0_result(view: dict, degraded: bool = False) -> dict:
    """A memstrata memory in mem0's result shape: memstrata's own fields under ``metadata``.

    The top-level copies of visibility/project_id/memory_type stay for callers written against
    Mem0Client.  A result answered from the local index (the store down) has no id and says so.
    """
    item = {key: view.get(key) for key in (*MEM0_FIELDS, "score", *MEM0_DATES)}
    metadata = mem0_metadata(view)
    metadata["degraded"] = degraded
    if view.get("source") == "local":
        item["memory"] = view.get("memory") or view.get("snippet") or ""
        metadata.update({k: view.get(k) for k in ("path", "lines", "heading")})
    item["metadata"] = metadata
    for key in ("visibility", "project_id", "memory_type"):
        item[key] = view.get(key)
    if view.get("score_details") is not None:
        item["score_details"] = view["score_details"]
    return item


class Memory:
    """mem0's ``Memory`` (mem0ai 2.2's public signatures) over the memstrata daemon.

    Written so that an agent built on ``from mem0 import Memory`` works with only
    its import changed.  Where memstrata differs on purpose (see SKILL.md):

    - who asks comes from the workspace token: ``agent_id`` may be given, but
      must name this agent (another name is an error, never ignored), while
      ``user_id``, ``run_id`` and ``actor_id`` are what they are in mem0: data
      stored with the memory, filtered on and returned, always inside what this
      agent may read (public, its projects', its own private memories);
    - the daemon owns the store, embedder and LLM: ``from_config`` reads only
      its ``memstrata`` section (agent, token, socket, workspace, config,
      timeout) and ignores mem0's vector_store/llm/embedder settings;
    - ``metadata`` on add carries memstrata's placement (``visibility``,
      ``project_id``, ``expiration_date``, ``memory_type``); every other key is
      kept as mem0 keeps it (free keys, JSON values; the memory's own field
      names are reserved) and filterable in mem0's filter language;
    - ``infer=None`` (the default here) lets the daemon decide: on when it has
      an LLM configured; ``reset()`` is refused (an agent may not wipe the
      conversation store; ``delete_all`` removes the agent's own memories).
    """

    def __init__(self, config: dict | None = None, *, client: Mem0Client | None = None) -> None:
        options = dict((config or {}).get("memstrata") or {}) if isinstance(config, dict) else {}
        unknown = sorted(set(options) - {"agent", "token", "socket", "workspace", "config", "timeout"})
        if unknown:
            raise Mem0CompatError(f"unknown memstrata option(s) {', '.join(unknown)} in the config")
        self.client = client or Mem0Client.discover(
            options.get("agent"),
            token=options.get("token"),
            socket_path=options.get("socket"),
            workspace=options.get("workspace"),
            config=options.get("config"),
            timeout=float(options.get("timeout") or DEFAULT_TIMEOUT_S),
        )

    @classmethod
    def from_config(cls, config_dict: dict | None = None) -> Memory:
        return cls(config_dict or {})

    # ------------------------------------------------------------ identity and arguments

    @property
    def agent(self) -> str:
        return self.client._identity()

    def _check_agent(self, agent_id: object) -> None:
        """``agent_id`` as mem0 takes it: memstrata's agent is the token's, so it may only name this agent."""
        agent = self.agent
        if agent_id is not None and agent_id != "*" and str(agent_id).strip() != agent:
            raise Mem0CompatError(
                f"agent_id={agent_id!r} names another agent: this workspace's token is agent {agent!r}, and "
                "memstrata takes the agent from the token (drop the argument or pass your own id; user_id, "
                "run_id and actor_id are data and may name anyone)"
            )

    def _filters(self, filters: dict | None, **ids: object) -> dict | None:
        """mem0's ``filters`` plus the ids given as arguments, for the daemon (which checks the language).

        A top-level ``agent_id`` is the caller's identity (checked, then dropped: the daemon already reads
        as this agent); ``user_id``/``run_id``/``actor_id`` stay conditions on the memories' data.
        """
        if filters is not None and not isinstance(filters, dict):
            raise Mem0CompatError("filters must be a dict (mem0's filter dictionary)")
        wanted = dict(filters or {})
        self._check_agent(wanted.pop("agent_id", None))
        self._check_agent(ids.pop("agent_id", None))
        for key, value in ids.items():
            if value is None:
                continue
            if key in wanted and wanted[key] != value:
                raise Mem0CompatError(f"{key} given twice, as {value!r} and filters.{key}={wanted[key]!r}")
            wanted[key] = value
        return wanted or None

    @staticmethod
    def _memory_type(memory_type: str | None, metadata: dict) -> str | None:
        chosen = memory_type or metadata.get("memory_type")
        return memory_type_of(chosen)

    # ------------------------------------------------------------ writing

    def add(
        self,
        messages,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict | None = None,
        timestamp=None,
        expiration_date=None,
        infer: bool | None = None,
        memory_type: str | None = None,
        prompt: str | None = None,
        output_format: str | None = None,
    ) -> dict:
        """A string, a message dict or a list of them; ``{"results": [{"id", "memory", "event", …}]}``.

        With infer off each non-system message becomes its own memory with its
        role (as mem0 does); with infer on the conversation goes to the daemon's
        LLM in one request.  A write queued while the store is down has no id
        yet: its result carries ``event: "QUEUED"`` and the ``write_id``.
        """
        self._check_agent(agent_id)
        _output_format({"output_format": output_format})
        if timestamp is not None:
            raise Mem0CompatError("timestamp is a mem0 platform feature; memstrata sets created_at itself")
        if prompt is not None:
            raise Mem0CompatError("prompt is not supported: the daemon's LLM uses mem0's own prompts")
        metadata = dict(metadata or {})
        custom = {k: v for k, v in metadata.items() if k not in ADD_METADATA}
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        elif isinstance(messages, dict):
            messages = [messages]
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") for m in messages
        ):
            raise Mem0CompatError("messages must be a str, a dict or a list of dicts with role and content")
        fields = {
            "memory_type": self._memory_type(memory_type, metadata),
            "visibility": metadata.get("visibility"),
            "project": metadata.get("project_id"),
            "expires": expiration_date or metadata.get("expiration_date"),
            "user_id": user_id,
            "run_id": run_id,
            "metadata": custom or None,
            "supersedes": metadata.get("supersedes"),
            "trust": metadata.get("trust"),
            "source": metadata.get("source"),
        }
        turns = [m for m in messages if m["role"] != "system"]
        if infer is None:  # the daemon's default: on when it has an LLM
            infer = bool((self.client.status().get("conversation") or {}).get("infer_default"))
        if infer:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in turns)
            return self._added([self.client.add(text, infer=True, **fields)])  # type: ignore[arg-type]
        answers = [self._add_one(m, infer, fields) for m in turns]
        return self._added(answers)

    def _add_one(self, message: dict, infer: bool | None, fields: dict) -> dict:
        role = None if message["role"] == "user" else message["role"]
        actor = message.get("name")  # mem0 keeps a message's name as its actor_id
        add = Add(self.agent, message["content"], role=role, infer=infer, actor_id=actor, **fields)
        answer = self.client.call(add)
        answer["role"] = message["role"]
        return answer

    @staticmethod
    def _added(answers: list[dict]) -> dict:
        results = []
        for answer in answers:
            meta = {k: answer.get(k) for k in ("visibility", "project_id", "memory_type", "write_id")}
            meta.update(degraded=False, queued=bool(answer.get("queued")), infer=answer.get("infer"))
            if answer.get("queued"):
                results.append({"id": None, "memory": None, "event": "QUEUED", "metadata": {**meta}})
                continue
            for r in answer.get("results") or []:
                item = {"id": r.get("id"), "memory": r.get("memory"), "event": r.get("event"), "metadata": meta}
                item.update(role=answer.get("role", "user"), visibility=meta["visibility"])
                item.update(project_id=meta["project_id"], memory_type=meta["memory_type"])
                item.update({k: answer.get(k) for k in ("user_id", "run_id")}, actor_id=answer.get("actor_id"))
                results.append(item)
        return {"results": results}

    def update(
        self, memory_id: str, text: str | None = None, metadata: dict | None = None, expiration_date=_UNSET, data=None
    ):
        """Replace the text of one of this agent's own memories (re-embedded; created_at kept)."""
        text = text if text is not None else data
        meta = dict(metadata or {})
        unknown = sorted(set(meta) - {"expiration_date"})
        if unknown:
            raise Mem0CompatError(
                f"metadata key(s) {', '.join(unknown)} cannot be updated: only text and expiration_date"
            )
        expires = meta.get("expiration_date") if expiration_date is _UNSET else expiration_date
        if text is None:
            current = self.get(memory_id)
            if current is None:
                raise Mem0CompatError(f"Memory with id {memory_id} not found")
            if expires is None:
                raise Mem0CompatError("At least one of text, metadata, or expiration_date must be provided.")
            text = current["memory"]
        answer = self._request(Update(self.agent, str(memory_id), text, expires=expires or None))
        return {"message": "Memory updated successfully!", "id": answer.get("id"), "result": mem0_result(answer)}

    def delete(self, memory_id: str) -> dict:
        self._request(Delete(self.agent, str(memory_id)))
        return {"message": "Memory deleted successfully!"}

    def delete_all(self, user_id=None, agent_id=None, run_id=None, *, filters: dict | None = None) -> dict:
        """Delete this agent's own memories (narrowed by user_id, run_id, actor_id, memory_type, visibility,
        project_id: one value each)."""
        wanted = self._filters(filters, user_id=user_id, agent_id=agent_id, run_id=run_id) or {}
        params: dict = {}
        names = {"memory_type": "memory_type", "visibility": "visibility", "project_id": "project"}
        names.update({k: k for k in ("user_id", "run_id", "actor_id")})
        for key in list(wanted):
            value = wanted.pop(key)
            if key not in names or value == "*":
                if value == "*":
                    continue
                raise Mem0CompatError(f"delete_all filters on {', '.join(names)} only, not {key}")
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise Mem0CompatError(f"delete_all filters.{key}: one value only")
            params[names[key]] = value
        answer = self.client.call(DeleteAll(self.agent, **params))
        return {"message": "Memories deleted successfully!", "deleted": answer.get("deleted"), "ids": answer.get("ids")}

    def reset(self) -> None:
        raise Mem0CompatError(
            "reset() is refused for agents: the store is shared by every agent (delete_all() removes your own "
            "memories; the administrator uses `memstrata cleanup`)"
        )

    # ------------------------------------------------------------ reading

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        top_k: int | None = None,
        filters: dict | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        rerank: bool = False,
        explain: bool = False,
        show_expired: bool = False,
        **unsupported,
    ) -> dict:
        """Memories this agent may read (public, its projects', its own), best first, mem0's shape.

        ``threshold`` is mem0's (default 0.1, 0-1) on the daemon's relevance scale, calibrated for the
        local model so that 0.1 drops most unrelated memories; ``explain`` adds each result's
        ``score_details``; ``rerank`` answers, in ``rerank``, that no reranker is configured.

        ``filters`` is mem0's filter language (AND/OR/NOT, eq/ne/in/nin/gt/gte/lt/lte/contains/icontains,
        ``*``) over the ids, memstrata's fields and custom metadata; the daemon ANDs it with what this
        agent may read, so it narrows and never widens.
        """
        _output_format(unsupported)
        if unsupported:
            raise Mem0CompatError(f"search() got unsupported argument(s) {', '.join(sorted(unsupported))}")
        wanted = self._filters(filters, user_id=user_id, agent_id=agent_id, run_id=run_id)
        if threshold is None:
            threshold = DEFAULT_THRESHOLD
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise Mem0CompatError(f"Invalid threshold: {threshold}. Must be between 0 and 1 (inclusive).")
        count = top_k or limit or 20
        answer = self.client.search(
            query,
            limit=min(100, count),
            filters=wanted,
            threshold=float(threshold),
            explain=bool(explain),
            show_expired=bool(show_expired),  # until the cleanup job deletes them (mem0 only ever hides them)
            show_superseded=bool(show_expired),  # mem0's "expired": no longer valid, a replaced fact too
        )
        degraded = bool(answer.get("degraded"))
        out: dict = {"results": [mem0_result(view, degraded) for view in answer.get("results") or []][:count]}
        if rerank:
            out["rerank"] = "not applied: no reranker is configured (results are in relevance order)"
        if degraded:
            out.update(degraded=True, reason=answer.get("reason"))
        return out

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict | None = None,
        limit: int | None = None,
        top_k: int | None = None,
        show_expired: bool = False,
        **unsupported,
    ) -> dict:
        """Memories this agent may read, mem0's shape; ``show_expired`` also those past their date or replaced."""
        _output_format(unsupported)
        if unsupported:
            raise Mem0CompatError(f"get_all() got unsupported argument(s) {', '.join(sorted(unsupported))}")
        wanted = self._filters(filters, user_id=user_id, agent_id=agent_id, run_id=run_id)
        count = top_k or limit or 20
        shown = {"show_expired": bool(show_expired), "show_superseded": bool(show_expired)}
        answer = self.client.get_all(limit=count, filters=wanted, **shown)
        return {"results": [mem0_result(v) for v in answer.get("results") or []][:count]}

    def get(self, memory_id: str) -> dict | None:
        """One memory by id, or None (as mem0) when there is none this agent may read."""
        try:
            view = self.client.call(Get(self.agent, str(memory_id)))
        except RequestError as exc:
            if exc.status == 404:
                return None
            raise
        return mem0_result(view)

    def history(self, memory_id: str) -> list[dict]:
        """mem0's history of one memory: ADD/UPDATE/DELETE events, oldest first."""
        return self._request(History(self.agent, str(memory_id)))["results"]

    def _request(self, operation: Operation) -> dict:
        """As the client's, with "no such memory" a ValueError as in mem0."""
        try:
            return self.client.call(operation)
        except RequestError as exc:
            if exc.status == 404:
                raise Mem0CompatError(f"Memory not found: {exc.message}") from None
            raise

    def close(self) -> None:
        """Nothing to close: every call is one request over the socket."""

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _output_format(options: dict) -> None:
    """mem0's older ``output_format``: only "v1.1" (``{"results": [...]}``) is made, so only it is taken."""
    chosen = options.pop("output_format", None)
    if chosen not in (None, "v1.1"):
        raise Mem0CompatError(f"output_format={chosen!r}: memstrata answers in mem0's v1.1 format only")


class AsyncMemory:
    """mem0's ``AsyncMemory``: the same calls as :class:`Memory`, awaited (each runs in a worker thread).

    The daemon does the work; an event loop is kept free while a request is on its way.
    """

    def __init__(self, config: dict | None = None, *, client: Mem0Client | None = None) -> None:
        self._memory = Memory(config, client=client)

    @classmethod
    def from_config(cls, config_dict: dict | None = None) -> AsyncMemory:
        return cls(config_dict or {})  # as mem0's: constructed without awaiting

    def __getattr__(self, name: str):
        method = getattr(self._memory, name)
        if not callable(method) or name.startswith("_"):
            return method

        async def call(*args, **kwargs):
            import asyncio

            return await asyncio.to_thread(method, *args, **kwargs)

        call.__name__ = name
        call.__doc__ = method.__doc__
        return call

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._memory.close()


# ------------------------------------------------------------------ readable output


# The keys of the daemon's answers this client reads (daemon/common/contracts.py defines them; this file cannot
# import it, being stdlib only): tests/daemon/front/test_front.py checks that each exists there.
READS = {
    "StatusDocument": ("daemon", "conversation"),
    "DaemonInfo": ("running", "summary"),
    "ConversationStatus": ("enabled", "reachable", "last_error", "backend", "collection", "queue"),
    "MemoryAnswer": ("degraded", "reason", "vectors", "results", "truncated"),
    "Memory": (
        "source",
        "lines",
        "path",
        "snippet",
        "memory",
        "memory_type",
        "agent_id",
        "created_at",
        "expiration_date",
        "id",
        "score",
        "visibility",
        "project_id",
    ),
    "AddAnswer": (
        "visibility",
        "project_id",
        "visibility_inferred",
        "expiration_date",
        "queued",
        "reason",
        "write_id",
        "results",
        "memory_type",
    ),
}


def _placement(memory: dict) -> str:
    return str(memory.get("visibility")) + (f":{memory['project_id']}" if memory.get("project_id") else "")


def format_memory(i: int, memory: dict) -> list[str]:
    """One result as two lines: where and what it is, then the text."""
    if memory.get("source") == "local":
        lines = memory.get("lines") or ["?", "?"]
        head = f"{i}. [local {memory.get('path')}:{lines[0]}-{lines[1]}]"
        text = memory.get("snippet") or memory.get("memory") or ""
    else:
        meta = f"{memory.get('memory_type')}, by {memory.get('agent_id')}, {(memory.get('created_at') or '')[:10]}"
        if memory.get("expiration_date"):
            meta += f", until {memory['expiration_date']}"
        if memory.get("state") in ("superseded", "archived"):
            meta += f", {memory['state'].upper()}"
        head = f"{i}. [{_placement(memory)}] ({meta})  id {memory.get('id')}"
        text = memory.get("memory") or ""
    if memory.get("score") is not None:
        head += f"  score {memory['score']:.3f}"
    return [head, *(f"   {line}" for line in str(text).splitlines() or [""])]


def format_search(answer: dict) -> str:
    out = []
    if answer.get("degraded"):
        out.append(
            f"(degraded: the conversation memory did not answer — {answer.get('reason')}; "
            "these results come from your local index)"
        )
        if str(answer.get("vectors") or "").startswith("unavailable"):
            out.append(f"(lexical only: vectors {answer['vectors']})")
    results = answer.get("results") or []
    out.append("no matches" if not results else "")
    for i, memory in enumerate(results, start=1):
        out.extend(format_memory(i, memory))
    return "\n".join(line for line in out if line)


def format_add(answer: dict) -> str:
    where = _placement(answer) + (" (inferred)" if answer.get("visibility_inferred") else "")
    expiry = f", expires after {answer['expiration_date']}" if answer.get("expiration_date") else ", never expires"
    if answer.get("queued"):
        reason = answer.get("reason")
        return f"queued {answer.get('write_id')} [{where}]{expiry}: {reason} (written once the store is back)"
    ids = ", ".join(str(r.get("id")) for r in answer.get("results") or []) or "nothing new (merged by the LLM)"
    return f"remembered {ids} [{where}, {answer.get('memory_type')}]{expiry}"


def format_list(answer: dict, limit: int) -> str:
    results = answer.get("results") or []
    out = [] if results else ["no memories"]
    for i, memory in enumerate(results, start=1):
        out.extend(format_memory(i, memory))
    if answer.get("truncated"):
        out.append(f"(truncated: showing the first {len(results)} (--limit {limit}); more may exist)")
    return "\n".join(out)


def format_status(answer: dict) -> str:
    daemon = answer.get("daemon") or {}
    conv = answer.get("conversation") or {}
    out = [f"daemon        {'running' if daemon.get('running') else 'not running'}, {daemon.get('summary', '')}"]
    if not conv.get("enabled", True):
        out.append("conversation  disabled (conversation.enabled: false)")
        return "\n".join(out)
    state = "reachable" if conv.get("reachable") else f"UNREACHABLE: {conv.get('last_error') or 'starting'}"
    out.append(f"conversation  {conv.get('backend')} {conv.get('collection') or ''}: {state}")
    queue = conv.get("queue") or {}
    if queue:
        out.append(f"write queue   {queue.get('depth', 0)} waiting, {queue.get('replayed', 0)} replayed")
    return "\n".join(out)


# ------------------------------------------------------------------ command line

_COMMON = {
    "--agent": {"metavar": "ID", "help": f"agent id (default: ${AGENT_ENV}, else from the workspace name)"},
    "--workspace": {"metavar": "DIR", "help": "find the token from DIR instead of the current directory"},
    "--socket": {"metavar": "PATH", "help": f"daemon socket (default: ${SOCKET_ENV}, else from the configuration)"},
    "--config": {"metavar": "FILE", "help": f"memstrata configuration (default: ${CONFIG_ENV}, else {SYSTEM_CONFIG})"},
    "--timeout": {
        "type": float,
        "metavar": "S",
        "help": f"seconds to wait for the daemon (default {DEFAULT_TIMEOUT_S:g})",
    },
}


def _common_options() -> argparse.ArgumentParser:
    """Options accepted before or after the command; SUPPRESS keeps a subcommand from erasing them."""
    parent = argparse.ArgumentParser(add_help=False)
    for flag, spec in _COMMON.items():
        parent.add_argument(flag, default=argparse.SUPPRESS, **spec)
    parent.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    return parent


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def json_object(value: str) -> dict:
    """A command-line value that must be a JSON object (mem0's filters, a memory's metadata)."""
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        raise argparse.ArgumentTypeError(f"not JSON: {value[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, like \'{"user_id": "alice"}\'')
    return parsed


def fraction(value: str) -> float:
    """A command-line number from 0 to 1 (a relevance threshold)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return number


def _help(text: str) -> str:
    """A field's help as argparse shows it: lower-case start, no closing full stop."""
    return (text[:1].lower() + text[1:]).rstrip(".")


def field_arguments(parser: argparse.ArgumentParser, operation: type, *names: str, **spelled: dict) -> None:
    """The options of ``operation``'s fields ``names`` (protocol/operations.py: help, choices, bounds, default);
    ``spelled``: by field, the flag when it is not ``--field-name`` and any argparse keyword that differs."""
    fields = {f.name: f for f in describe(operation)}
    for name in names:
        item, spec = fields[name], dict(spelled.get(name, {}))
        flag = spec.pop("flag", "--" + name.replace("_", "-"))
        kwargs: dict[str, Any] = {"dest": name, "help": _help(item.help)}
        if item.kind is bool and item.default is None:  # left to the daemon: --x, --no-x or neither
            kwargs.update(action="store_const", const=True, **spec)
            parser.add_argument(flag, **kwargs)
            parser.add_argument("--no-" + flag[2:], dest=name, action="store_const", const=False)
            continue
        if item.kind is bool:
            kwargs["action"] = "store_false" if item.default else "store_true"
        elif item.choices is not None:
            kwargs["choices"] = item.choices
        elif item.kind is int:
            kwargs["type"] = _positive if item.low == 1 else int
        elif item.kind is float:
            kwargs["type"] = fraction if (item.low, item.high) == (0, 1) else float
        elif item.kind is dict:
            kwargs.update(type=json_object, metavar="JSON")
        elif item.pattern == DAY_PATTERN:
            kwargs["metavar"] = "YYYY-MM-DD"
        if item.kind is not bool and item.default is not None:
            kwargs["default"] = item.default
        kwargs.update(spec)
        parser.add_argument(flag, **kwargs)


def fields_of(args: argparse.Namespace, operation: type) -> dict[str, Any]:
    """The parsed options that are ``operation``'s optional fields (those a command took), by field name."""
    return {f.name: getattr(args, f.name) for f in describe(operation) if not f.required and hasattr(args, f.name)}


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(prog="mem0_client.py", description=__doc__.split("\n\n")[0], parents=[common])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # The search's and the add's options are their operations' fields; the flags are the skill's own.
    search = commands.add_parser("search", parents=[common], help="recall: conversation memories you may read")
    search.add_argument("query")
    field_arguments(
        search,
        MemorySearch,
        *("limit", "fallback", "filters", "threshold", "explain", "show_expired", "show_superseded", "trust_min"),
        *("max_tokens", "since", "until"),
        fallback={"flag": "--no-fallback", "help": "fail instead of answering from the local index"},
        threshold={"metavar": "T"},
        max_tokens={"type": int, "metavar": "N"},
    )

    add = commands.add_parser("add", parents=[common], help="remember TEXT in the conversation memory")
    add.add_argument("text")
    field_arguments(
        add,
        Add,
        *("memory_type", "visibility", "project", "expires", "infer", "write_id", "user_id", "run_id", "actor_id"),
        *("metadata", "supersedes", "trust", "source"),
        memory_type={"flag": "--type"},
        project={"metavar": "P"},
        write_id={"metavar": "ID"},
        user_id={"metavar": "U"},
        run_id={"metavar": "R"},
        actor_id={"metavar": "A"},
        supersedes={"metavar": "MEMORY_ID"},
    )

    get_all = commands.add_parser(
        "get_all", aliases=["get-all"], parents=[common], help="list every memory you may read"
    )
    get_all.add_argument("--limit", type=_positive, default=100, help="at most this many in total (default 100)")
    get_all.add_argument("--page-size", type=_positive, default=PAGE_MAX, help=argparse.SUPPRESS)
    field_arguments(get_all, List, "filters")

    for name, text in (("get", "one memory by id"), ("delete", "delete one of your own memories by id")):
        one = commands.add_parser(name, parents=[common], help=text)
        one.add_argument("memory_id")

    commands.add_parser("status", parents=[common], help="is the daemon up, is the conversation store reachable")
    return parser


def run(args: argparse.Namespace) -> tuple[dict, str]:
    """Carry out one command: (the answer, its readable form)."""
    client = Mem0Client.discover(
        getattr(args, "agent", None),
        socket_path=getattr(args, "socket", None),
        workspace=getattr(args, "workspace", None),
        config=getattr(args, "config", None),
        timeout=getattr(args, "timeout", None) or DEFAULT_TIMEOUT_S,
    )
    if args.command == "search":
        answer = client.search(args.query, **fields_of(args, MemorySearch))
        return answer, format_search(answer)
    if args.command == "add":
        answer = client.add(args.text, **fields_of(args, Add))
        return answer, format_add(answer)
    if args.command in ("get_all", "get-all"):
        answer = client.get_all(limit=args.limit, page_size=args.page_size, filters=args.filters)
        return answer, format_list(answer, args.limit)
    if args.command == "get":
        answer = client.get(args.memory_id)
        return answer, "\n".join(format_memory(1, answer))
    if args.command == "delete":
        answer = client.delete(args.memory_id)
        return answer, f"deleted {answer.get('deleted')}"
    answer = client.status()
    return answer, format_status(answer)


def main(argv: list[str] | None = None) -> int:
    """Exit 0 on success, 1 when memstrata said no (or could not be reached), 2 for usage errors."""
    args = build_parser().parse_args(argv)
    try:
        answer, readable = run(args)
    except MemstrataError as exc:
        print(f"mem0_client: {exc}", file=sys.stderr)
        too_long = isinstance(exc, RequestError) and exc.status == 413
        return 2 if isinstance(exc, UsageError) or too_long else 1
    text = json.dumps(answer, ensure_ascii=False, indent=2) if getattr(args, "json", False) else readable
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head` closed the pipe: what was wanted has been read
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
