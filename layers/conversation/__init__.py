"""L4 conversation memory: the Mem0/Qdrant store shared by every agent.

Importing this package must stay cheap: mem0 (≈95 MB, ≈0.9 s) is imported only
by the store module, never at package import.
"""
