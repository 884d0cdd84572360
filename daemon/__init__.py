"""memstrata's service: lifecycle, watcher, scheduler, local API and CLI.

It composes the libraries in ``layers``; nothing in ``layers`` imports it.
"""

__version__ = "0.1.0"
