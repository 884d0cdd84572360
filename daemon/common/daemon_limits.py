"""Limits of the daemon's API: what clients check before sending, and what the daemon holds to.

A search query travels in a JSON body (``POST /v1/search``, ``POST
/v1/memories/search``), never in the URL, whose length HTTP servers cap at a
few KiB.  Queries are still bounded: nobody searches memory with a page of
text, and scoring one costs time per term.  That limit and the other ones a
client checks are the protocol's (protocol/limits.py, which the skill's copy of
the package shares); this module adds the daemon's own.

The rest bounds what one caller can make the daemon hold or do: every route
has a body limit (refused from the declared length, before a byte of the body
is read), a connection must send its headers within a deadline and may not go
quiet mid-request, and each caller gets a bounded share of the API's threads.
README.md ("Limits") documents these figures.
"""

from __future__ import annotations

import os

# The limits every client holds to, and the result bounds, are the protocol's: re-exported here for the
# daemon's modules (the request schemas, the routes) that read them with the daemon-only ones below.
from protocol.limits import (
    ANSWER_TOKENS,
    CLIENT_RETRIES,
    CLIENT_RETRY_CAP_S,
    L3_RESULTS,
    L4_PAGE,
    L4_RESULTS,
    MAX_MEMORY_TEXT_CHARS,
    MAX_MESSAGES_PER_ADD,
    MAX_QUERY_CHARS,
    QueryTooLongError,
    Results,
    TooManyItemsError,
    check_count,
    check_query,
)

__all__ = [
    "ANSWER_TOKENS",
    "BODY_FIELDS_BYTES",
    "CLIENT_RETRIES",
    "CLIENT_RETRY_CAP_S",
    "HEADER_TIMEOUT_S",
    "IDLE_TIMEOUT_S",
    "JSON_BYTES_PER_CHAR",
    "KEEP_ALIVE_S",
    "L3_RESULTS",
    "L4_PAGE",
    "L4_RESULTS",
    "MAX_CONNECTIONS",
    "MAX_ECHO_CHARS",
    "MAX_HEADER_BYTES",
    "MAX_MEMORY_BODY_BYTES",
    "MAX_MEMORY_TEXT_CHARS",
    "MAX_MESSAGES_PER_ADD",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_BODY_BYTES",
    "MAX_SMALL_BODY_BYTES",
    "PER_CALLER_QUEUED",
    "PER_CALLER_RUNNING",
    "WORK_THREADS",
    "QueryTooLongError",
    "Results",
    "TooManyItemsError",
    "check_count",
    "check_query",
]
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
