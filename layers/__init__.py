"""The four memory layers as libraries, one package each, and what they all use.

- ``core/``: L1, the files an agent reads at the start of every session (the bundle and its budget);
- ``daily/``: L2, MEMORY.md and the daily notes, and the git that versions them (``daily/git/``);
- ``local/``: L3, one agent's search index (SQLite FTS5 and vectors), rebuildable from markdown;
- ``conversation/``: L4, conversation memory: mem0 over Qdrant (Edge in-process, or a server),
  with visibility, validity, decay, the durable queue and consolidation;
- ``common/``: what every layer (and the daemon) uses: crash-safe and symlink-safe file writes,
  agent ids, file names as text, validated YAML, the token estimate, the allocator, lock owners,
  Chinese numerals and day names.

Each layer has one small public face, knows nothing of the daemon, and imports only itself and
``common`` (tests/test_layout.py): the daemon composes them (the L4 → L3 search fallback lives in
the daemon's broker, not inside L4).
"""
