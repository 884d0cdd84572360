"""L4 consolidation: duplicates folded, conflicts settled, task logs summed up, as one batch that can be undone.

- ``nightly``: a run: scan, plan, ask, report, apply as one exclusive call, undo;
- ``plan``: pure: what a consolidation would change (duplicate clusters, conflicts, groups, refusal);
- ``sameness``: when two memories say the same thing beyond their cosine (anchors, words, order);
- ``thresholds``: the measured cosines the thresholds stand on;
- ``judge``: the LLM the run asks, its answers checked before anything acts on them;
- ``store_view``: the store as consolidation reads it (raw payloads with their vectors).

It uses the adapters (the store), the policy and the lifecycle, and nothing uses it but the daemon.
"""
