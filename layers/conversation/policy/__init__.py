"""L4 policy: who may read and write what, and how long a memory lives."""
