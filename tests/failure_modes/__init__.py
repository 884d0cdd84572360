"""One module per failure mode the daemon survives (issue: nothing lost, leaked or crashed)."""
