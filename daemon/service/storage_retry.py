"""The loop's writes that a full (or read-only) disk refused, tried again when their back-off has passed.

The broker retries the queue and the store, the embedding worker its vectors;
these are the loop's own: processed-files records, tokens, indexes, git.
"""

from __future__ import annotations

from daemon.common.storage import StorageHealth, is_storage_message
from daemon.files.agents import Agents
from daemon.files.provision import Provisioner
from daemon.files.reconcile import Reconciler
from daemon.files.tracker import AgentTracker
from daemon.local.indexer import Indexer

# Writes the loop retries itself (the broker retries the queue and the store, the embedding worker its vectors).
LOOP_PLACES = ("records", "tokens", "index", "git")


class StorageRetry:
    def __init__(
        self,
        agents: Agents,
        provision: Provisioner,
        indexer: Indexer,
        reconciler: Reconciler,
        storage: StorageHealth,
    ) -> None:
        self.agents = agents
        self.provision = provision
        self.indexer = indexer
        self.reconciler = reconciler
        self.storage = storage

    def next_retry(self) -> float | None:
        return self.storage.next_retry(LOOP_PLACES)

    def note_commit(self, tracker: AgentTracker) -> None:
        """Mirror a commit failure that is a full or read-only disk into the storage report."""
        if tracker.last_error and is_storage_message(tracker.last_error):
            # the tracker logged it and retries with its own back-off
            self.storage.failed("git", tracker.last_error, subject=tracker.id, path=tracker.workspace, quiet=True)
        else:  # committed, or failing for another reason (the agent's own error says which)
            self.storage.succeeded("git", tracker.id)

    def retry_due(self, now: float) -> None:
        """Writes that a full disk refused, tried again when their back-off has passed."""
        for place, subject in self.storage.due(LOOP_PLACES, now):
            tracker = self.agents.get(subject)
            if subject and tracker is None:
                self.storage.forget(subject)  # the agent went away
                continue
            if place == "records" and tracker is not None:
                tracker.files.save()
            elif place == "tokens" and tracker is not None:
                self.provision.ensure_token(tracker)
            elif place == "tokens":
                self.provision.ensure_admin_token()
            elif place == "index" and tracker is not None:

                def open_index(t: AgentTracker = tracker) -> object:
                    return self.indexer.open(t.agent, self.agents.desired(t))

                self.storage.attempt("index", open_index, subject=subject, path=tracker.agent.index)
            elif place == "git" and tracker is not None and not tracker.pending:
                # a failed `git init` (a pending commit is retried by the tracker's own back-off)
                self.reconciler.one(tracker)
                if tracker.last_error is None and not tracker.pending:
                    self.storage.succeeded("git", subject)
            self.storage.postpone(place, subject, now)  # whatever did not clear waits for its back-off
