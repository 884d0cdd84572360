"""Limits of the daemon's API: what clients check before sending, and what the daemon holds to.

A search query travels in a JSON body (``POST /v1/search``, ``POST
/v1/memories/search``), never in the URL, whose length HTTP servers cap at a
few KiB.  Queries are still bounded: nobody searches memory with a page of
text, and scoring one costs time per term.  The skill client
(skills/mem0-integration/mem0_client.py, standard library only) keeps a copy
of :data:`MAX_QUERY_CHARS`; tests/skills checks that the two agree.

The rest bounds what one caller can make the daemon hold or do: every route
has a body limit (refused from the declared length, before a byte of the body
is read), a connection must send its headers within a deadline and may not go
quiet mid-request, and each caller gets a bounded share of the API's threads.
README.md ("Limits") documents these figures.
"""

from __future__ import annotations

import os
from typing import NamedTuple

MAX_QUERY_CHARS = 4096  # documented in README.md ("Limits")
MAX_MEMORY_TEXT_CHARS = 20_000  # one L4 memory's text
# What one character of text (a code point, as len() and the limits above count) takes in a JSON body
# at worst: a character outside the Basic Multilingual Plane (an emoji) escaped as its surrogate pair,
# "\ud83d\ude00", is 12 bytes, and json.dumps escapes so by default (the daemon's own client does).
# A control character ("\u001f") is 6, and any character unescaped in UTF-8 at most 4.
JSON_BYTES_PER_CHAR = 12
# A search body holds the query at worst and a few options: the longest query the limit admits is
# always read, and one character more is refused by check_query, with the message about the query.
BODY_FIELDS_BYTES = 8192
MAX_SEARCH_BODY_BYTES = JSON_BYTES_PER_CHAR * MAX_QUERY_CHARS + BODY_FIELDS_BYTES  # 56 KiB
# An add or update body: the text escaped at 6 bytes per character (any character of the Basic
# Multilingual Plane) and a few short fields; a text of 20,000 emoji escaped (240,000 bytes) is not.
MAX_MEMORY_BODY_BYTES = 128 * 1024
assert MAX_MEMORY_BODY_BYTES >= 6 * MAX_MEMORY_TEXT_CHARS + BODY_FIELDS_BYTES
MAX_SMALL_BODY_BYTES = 8192  # reindex, a memory's restore, admin maintenance: a few flags and a path


class Results(NamedTuple):
    """How many results a request may ask for: ``default`` when it does not say; a number outside
    ``low``..``high`` is taken as the nearest bound, not refused (clients have long sent any figure)."""

    default: int
    low: int
    high: int


L3_RESULTS = Results(10, 1, 200)  # an L3 search (POST /v1/search)
L4_RESULTS = Results(10, 1, 100)  # an L4 search (POST /v1/memories/search)
L4_PAGE = Results(100, 1, 1000)  # a page of the L4 listing (GET /v1/memories)
# max_tokens of a search's answer (layers/local/budget.py); not given: no budget (the default is unused)
ANSWER_TOKENS = Results(800, 1, 1_000_000)

# One mem0 add (``POST /v3/memories/add/``) takes at most this many messages: without ``infer`` each is a
# memory of its own (an embedding, a duplicate check and a store write each, ~13 ms here and ~100 ms on
# the seed's 2-core Xeon), so 2,500 one-word messages, which fit in the 128 KiB body, held the daemon
# for minutes.  A conversation turn is a few messages; more go in further adds.
MAX_MESSAGES_PER_ADD = 100

# A value the daemon repeats back (in an error) or writes down (in the audit log) is cut to this many
# characters; what it was is said by its length ("… (5,242,880 characters)").
MAX_ECHO_CHARS = 120

# Connections: the headers of a request must arrive within HEADER_TIMEOUT_S of its first byte (or of
# the connection), and a request half sent may be silent for at most IDLE_TIMEOUT_S; between requests
# a kept-alive connection is closed after KEEP_ALIVE_S.  MAX_HEADER_BYTES bounds the request line and
# headers; MAX_CONNECTIONS bounds the connections served at once (past it: 503).
HEADER_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 5
MAX_HEADER_BYTES = 16 * 1024
MAX_CONNECTIONS = 1024

# Fairness: each caller (one token: an agent, the administrator, or callers without a token) runs at
# most PER_CALLER_RUNNING requests at once and queues at most PER_CALLER_QUEUED more; past that it is
# answered 429 with Retry-After.  WORK_THREADS bound the requests of all callers running at once; a
# free thread goes to the callers in turn (round robin), so a flood from one never starves another.
PER_CALLER_RUNNING = 1
PER_CALLER_QUEUED = 32
WORK_THREADS = max(8, 4 * (os.cpu_count() or 1))
# A client told 429 waits Retry-After seconds (at most CLIENT_RETRY_CAP_S) and tries again, at most
# CLIENT_RETRIES times, then reports that the daemon is busy with the caller's own earlier requests.
CLIENT_RETRIES = 4
CLIENT_RETRY_CAP_S = 10.0


class QueryTooLongError(ValueError):
    """A search query over :data:`MAX_QUERY_CHARS` characters (HTTP 413)."""


class TooManyItemsError(Exception):
    """A list in a request over its cap (HTTP 413): the message names the field, how many came and the cap.

    Not a ValueError on purpose: raised inside a request schema's validator (daemon/api/requests.py),
    it passes through pydantic as itself instead of becoming one more 400 "value error".
    """


def check_count(field: str, items: object, cap: int, noun: str) -> None:
    """Refuse a list ``field`` of more than ``cap`` items (``noun``: what one item is, plural)."""
    if isinstance(items, list | tuple) and len(items) > cap:
        raise TooManyItemsError(f"{field} holds {len(items):,} {noun}; at most {cap:,} in one request")


def check_query(text: str) -> None:
    """Refuse a query over the limit with a message that gives both figures."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryTooLongError(
            f"the query is {len(text):,} characters; the limit is {MAX_QUERY_CHARS:,} "
            "(search for the few words that matter)"
        )
