"""The limits a client holds to before sending, and the bounds of how many results a request may ask.

A search query travels in a JSON body (``POST /v1/search``, ``POST /v1/memories/search``), never in the
URL, whose length HTTP servers cap at a few KiB.  Queries are still bounded: nobody searches memory with
a page of text, and scoring one costs time per term.  Every client checks the query here before sending
(the daemon refuses a longer one with 413 anyway).  The daemon's own limits (body bytes, timeouts,
fairness) stay in daemon/common/daemon_limits.py, which imports these; README.md ("Limits") documents both.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.errors import UsageError

MAX_QUERY_CHARS = 4096  # documented in README.md ("Limits")
MAX_MEMORY_TEXT_CHARS = 20_000  # one L4 memory's text


class Results(NamedTuple):
    """How many results a request may ask for: ``default`` when it does not say; a number outside
    ``low``..``high`` is taken as the nearest bound, not refused (clients have long sent any figure)."""

    default: int
    low: int
    high: int


L3_RESULTS = Results(10, 1, 200)  # an L3 search (POST /v1/search)
L4_RESULTS = Results(10, 1, 100)  # an L4 search (POST /v1/memories/search)
L4_PAGE = Results(100, 1, 1000)  # a page of the L4 listing (GET /v1/memories)
# max_tokens of a search's answer (layers/local/ranking/budget.py); not given: no budget (the default is unused)
ANSWER_TOKENS = Results(800, 1, 1_000_000)

# One mem0 add (``POST /v3/memories/add/``) takes at most this many messages: without ``infer`` each is a
# memory of its own (an embedding, a duplicate check and a store write each, ~13 ms here and ~100 ms on
# the seed's 2-core Xeon), so 2,500 one-word messages, which fit in the 128 KiB body, held the daemon
# for minutes.  A conversation turn is a few messages; more go in further adds.
MAX_MESSAGES_PER_ADD = 100

# A client told 429 (the caller's earlier requests fill its share of the daemon) waits Retry-After seconds
# (at most CLIENT_RETRY_CAP_S) and tries again, at most CLIENT_RETRIES times, then reports that the daemon
# is busy with the caller's own earlier requests.
CLIENT_RETRIES = 4
CLIENT_RETRY_CAP_S = 10.0


class QueryTooLongError(UsageError, ValueError):
    """A search query over :data:`MAX_QUERY_CHARS` characters (the daemon's answer would be HTTP 413)."""


class TooManyItemsError(Exception):
    """A list in a request over its cap (HTTP 413): the message names the field, how many came and the cap.

    Not a ValueError on purpose: raised inside a request schema's validator (daemon/api/requests.py),
    it passes through pydantic as itself instead of becoming one more 400 "value error".
    """


def check_count(field: str, items: object, cap: int, noun: str) -> None:
    """Refuse a list ``field`` of more than ``cap`` items (``noun``: what one item is, plural)."""
    if isinstance(items, (list, tuple)) and len(items) > cap:
        raise TooManyItemsError(f"{field} holds {len(items):,} {noun}; at most {cap:,} in one request")


def check_query(text: str) -> None:
    """Refuse a query over the limit with a message that gives both figures."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryTooLongError(
            f"the query is {len(text):,} characters; the limit is {MAX_QUERY_CHARS:,} "
            "(search for the few words that matter)"
        )
