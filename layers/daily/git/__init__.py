"""git plumbing for L2: commits, logs, the history copy, repairs."""
