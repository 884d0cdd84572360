"""Where an L4 write goes: the broker to the conversation store (Mem0/Qdrant), or the durable queue.

``broker`` composes the parts: ``writes`` (policy, dedup, the queue when the store
is down) and ``reads`` run their store calls on ``store_thread`` (the store's one
thread, behind a breaker); ``queue`` keeps writes the store could not take and
``replay`` sends them once it answers; ``maintenance_jobs`` runs cleanup, backup
and restore there; ``status`` is its part of the status document; ``tailscale``
says how the link to a remote store looks.
"""
