"""L3 ranking: hybrid search, confidence, budgets."""
