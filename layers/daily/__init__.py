"""L2 daily memory: MEMORY.md and the daily notes, versioned with git."""
