"""Limits of the daemon's API that every client checks before it sends anything.

A search query travels in a JSON body (``POST /v1/search``, ``POST
/v1/memories/search``), never in the URL, whose length HTTP servers cap at a
few KiB.  Queries are still bounded: nobody searches memory with a page of
text, and scoring one costs time per term.  The skill client
(skills/mem0-integration/mem0_client.py, standard library only) keeps a copy
of :data:`MAX_QUERY_CHARS`; tests/skills checks that the two agree.
"""

from __future__ import annotations

MAX_QUERY_CHARS = 4096  # documented in README.md ("Limits")
# A search body holds the query (at most 6 bytes per character once JSON-escaped) and a few options.
MAX_SEARCH_BODY_BYTES = 6 * MAX_QUERY_CHARS + 8192


class QueryTooLongError(ValueError):
    """A search query over :data:`MAX_QUERY_CHARS` characters (HTTP 413)."""


def check_query(text: str) -> None:
    """Refuse a query over the limit with a message that gives both figures."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryTooLongError(
            f"the query is {len(text):,} characters; the limit is {MAX_QUERY_CHARS:,} "
            "(search for the few words that matter)"
        )
