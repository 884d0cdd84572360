"""L3, the agent's own index: the indexer the tracker feeds, the embedding worker, search.

``indexer`` keeps each agent's SQLite FTS5 index in step with its markdown,
``index_files`` says which index files are memstrata's, ``embedding`` fills in
vectors in the background, ``search`` answers an agent's search from an API thread.
"""
