"""L4 adapters: the engines under mem0, and what keeps a caller from waiting on a dead one.

- ``store``: mem0's ``Memory`` over a Qdrant Edge shard (embedded) or a ``QdrantClient`` (remote),
  with ``edge_mem0`` the only modules that import mem0;
- ``edge``: every call into Qdrant Edge (a pinned beta: its next release is one diff here);
- ``edge_mem0``: mem0's vector store over an Edge shard;
- ``migrate``: the one-time import of the old embedded store into Edge;
- ``optimizer``: when the shard's HNSW index is rebuilt, off the request path;
- ``breaker``: the circuit breaker in front of the store.
"""
