"""L4 conversation memory: the Mem0/Qdrant store every agent shares, under visibility rules.

"conversation" is the word for L4 in code, configuration (``conversation:``) and the CLI alike.
Split by concern, each subpackage importing only those before it (tests/test_layout.py):

- ``policy/``: pure decisions: who may write where and read what (the project registry), a memory's
  metadata, its validity window, its decay by use, mem0's filter language checked and translated;
- ``lifecycle/``: what keeps memories durable and bounded over time: the durable queue and
  write-ahead log (with group commit), write ids, tombstones, expiry cleanup, backups;
- ``adapters/``: the engines: mem0 over a Qdrant Edge shard or a Qdrant server (every Edge call in
  ``edge``), the import of the old embedded store, the optimizer, the circuit breaker;
- ``consolidation/``: the nightly consolidation: plan, the sameness guard and its measured
  thresholds, the LLM judge, applying and undoing through the store.

Importing this package must stay cheap: mem0 (≈95 MB, ≈0.9 s) is imported only by the store
module (``adapters/store``), never at package import.
"""
