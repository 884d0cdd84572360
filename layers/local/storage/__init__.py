"""L3 storage: the index file and its vectors."""
