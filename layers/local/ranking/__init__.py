"""L3 ranking: from an index and a question to the answer an agent reads.

- ``hybrid_search``: BM25 and vectors fused by reciprocal rank, with the dates a question names and
  the companion model's list, and an answer that says which lists contributed and why not;
- ``calibration``: how likely a result is the passage that answers, on one 0-1 scale;
- ``budget``: each hit's passage, and a result list cut to ``max_tokens``.
"""
