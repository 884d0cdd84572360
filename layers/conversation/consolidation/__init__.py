"""L4 consolidation: plan, judge, apply, undo."""
