"""L1 core memory: the files an agent reads at the start of every session."""
