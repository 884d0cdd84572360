"""L4 adapters: mem0 over Qdrant Edge or a Qdrant server."""
