"""L4 lifecycle: what makes a write durable and keeps the store bounded over time.

- ``durable_queue``: the write-ahead log every add goes through, and the queue of writes the store
  could not take (replayed exactly once);
- ``group_commit``: callers that arrive while a commit is on its way share the next one;
- ``write_ids``: a write's identity inside its owner's scope, and the point id derived from it;
- ``tombstones``: whose a deleted memory was, so its history stays as private as it was;
- ``cleanup``: expiry (a memory's own date, else its type's retention);
- ``backup``: daily snapshots of the store, the newest N kept.

It uses ``policy`` (decay, validity) and no engine: the adapters use it, never the reverse.
"""
