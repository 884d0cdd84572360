"""L3 local index: one agent's search over its own markdown, offline (SQLite FTS5, CJK per character, vectors).

Split by concern, each subpackage importing only those before it (tests/test_layout.py):

- ``shapes``: the plain dicts L3 hands out (a search's answer, an index's statistics), standard
  library only, so the daemon's front can name them without loading the index's libraries;
- ``models/``: the embedders (a local GGUF through llama.cpp under a memory gate, an HTTP endpoint,
  the companion USE model) and the building of the local model;
- ``text/``: what text becomes before it is stored or searched: tokens, chunks, the passages a chunk
  is embedded as, safe FTS5 queries, the dates a question names, translation, glossary;
- ``storage/``: the index file (chunks, FTS5, vectors, the to-embed set), its one-byte vector codes,
  FTS5's BM25 with counts given, and the helper process a fresh build shares its work with;
- ``ranking/``: hybrid search (BM25 and vectors fused by reciprocal rank), the 0-1 confidence of a
  result, and answers cut to a token budget.
"""
