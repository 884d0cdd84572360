"""An L3 search from an API thread: the agent's own index, on a read-only connection of its own.

The loop is the index's single writer; a search that finds the index stale,
missing or damaged does not repair it here but asks the loop to rebuild it
(through its job queue) and answers "retry shortly".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import apsw

from daemon.common.contracts import SearchAnswer
from daemon.common.domain_errors import IndexUnavailableError, UnknownAgentError
from daemon.common.jobs import Jobs
from daemon.common.storage import is_storage_error
from daemon.common.workspaces import Agent
from daemon.local.dictionary import DictionaryFile
from daemon.local.indexer import Indexer
from layers.local.models.vectors import Embedder, LocalEmbedder
from layers.local.ranking.hybrid_search import search as search_index
from layers.local.storage.index import Filters, ForeignFile, Identity, IndexStale, LocalIndex
from protocol.operations import Search

#: Seconds a search waits for the query's vector (a model loading or busy with a batch); past
#: that it answers lexically and says why, so no tool call hangs on a loaded host. 3 s leaves the
#: rest of a search room under 5 s: with 4, a reload on a loaded host took 5.03 s end to end
#: (bench/bench_warm_model.py, the `unload: idle` rounds).
QUERY_EMBED_BUDGET_S = 3.0


class LocalSearch:
    def __init__(
        self,
        agent_of: Callable[[str], Agent | None],
        indexer: Indexer,
        identity: Identity,
        embedder: Embedder | None,
        vectors_blocked: Callable[[], str],
        loop_jobs: Jobs,
        pause: Callable[[], None] = lambda: None,
        dictionary: DictionaryFile | None = None,
    ) -> None:
        """``pause``: called before each model encode of a search (a flood's request makes way there)."""
        self.agent_of = agent_of  # an agent id -> the agent the daemon knows (None: unknown)
        self.indexer = indexer
        self.identity = identity
        self.embedder = embedder
        self.vectors_blocked = vectors_blocked  # why the embedding worker cannot embed now ("" when it can)
        self.loop_jobs = loop_jobs
        self.pause = pause
        self.dictionary = dictionary  # translates a question's words for the lexical side (None: never)

    def search(self, o: Search) -> SearchAnswer:
        """Search ``o.agent``'s index from an API thread (its own read connection)."""
        agent_id, text = o.agent, o.query
        filters = Filters(layer=o.layer, path_glob=o.path, since=o.since, until=o.until)
        agent = self.agent_of(agent_id)
        if agent is None:
            raise UnknownAgentError(f"unknown agent {agent_id!r}")
        refused = self.indexer.refused(agent_id)
        if refused:
            raise IndexUnavailableError(f"the index of {agent_id} is refused: {refused}")
        try:
            index = LocalIndex(agent.index, self.identity, readonly=True, verify=False)
        except ForeignFile as exc:
            raise IndexUnavailableError(f"the index of {agent_id} is refused: {exc}") from None
        except (IndexStale, FileNotFoundError) as exc:
            self.request_repair(agent, str(exc))
            raise IndexUnavailableError(
                f"the index of {agent_id} is being rebuilt from markdown ({exc}); retry shortly"
            ) from None
        except (apsw.Error, OSError) as exc:
            if not is_storage_error(exc):
                raise
            raise IndexUnavailableError(f"the index of {agent_id} cannot be opened: the disk is full ({exc})") from None
        embed: Callable[[str], Any] | None = None
        if isinstance(self.embedder, LocalEmbedder):  # waits QUERY_EMBED_BUDGET_S at most, then lexical
            embed = functools.partial(self.embedder.embed_query_within, budget_s=QUERY_EMBED_BUDGET_S)
        elif self.embedder is not None:
            embed = self.embedder.embed_query
        dictionary = self.dictionary.open() if self.dictionary is not None else None
        try:
            with index:
                answer = search_index(
                    index,
                    text,
                    limit=o.limit,
                    mode=o.mode,
                    filters=filters,
                    embed_query=embed,
                    no_embedder_reason="vectors are off (vectors.backend: off)",
                    blocked_reason=self.vectors_blocked(),
                    explain=o.explain,
                    pause=self.pause,
                    threshold=o.threshold,
                    translate=None if dictionary is None else dictionary.translate,
                    romanize=None if dictionary is None else dictionary.romanize,
                    max_tokens=o.max_tokens,
                    min_score=o.min_score,
                    calibrated=bool(getattr(self.embedder, "calibrated", False)),
                    **({"relevance": calibrated} if (calibrated := getattr(self.embedder, "relevance", None)) else {}),
                )
        except (apsw.CorruptError, apsw.NotADBError) as exc:
            self.request_repair(agent, f"the index file is damaged ({exc})")
            raise IndexUnavailableError(
                f"the index of {agent_id} is damaged and being rebuilt ({exc}); retry shortly"
            ) from None
        finally:
            if dictionary is not None:
                dictionary.close()
        return answer.to_dict()

    def request_repair(self, agent: Agent, why: str) -> None:
        """From an API thread: have the loop (the index's single writer) rebuild it."""
        if self.indexer.rebuilding(agent.id):
            return  # already rebuilding
        self.loop_jobs.submit(lambda: self.indexer.repair(agent, why))
