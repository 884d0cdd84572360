"""Utilities every layer (and the daemon) uses."""
