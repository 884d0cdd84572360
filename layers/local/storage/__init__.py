"""L3 storage: the per-agent index file that markdown can always rebuild.

- ``index``: the SQLite file (apsw, WAL): chunks, the FTS5 table, vectors cached by chunk hash, the
  to-embed set, its identity and rebuild;
- ``vector_codes``: one byte per dimension first, exact scores for the few kept;
- ``bm25``: FTS5's ``bm25()`` with the phrases' document counts given rather than walked;
- ``build_helper``: a fresh build's chunking and tokenizing shared with a helper process.

It uses ``text`` (tokens, chunks, queries) and never ``ranking``, which reads it.
"""
