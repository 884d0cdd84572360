"""L3 local index: per-agent SQLite FTS5 with per-character CJK search."""
