"""L3 text: tokens, chunks, queries, dates."""
