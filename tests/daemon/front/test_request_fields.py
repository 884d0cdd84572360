"""The L4 add, update and search and the L3 search fields: one definition, each other spelling checked against it.

The schemas of daemon/api/requests.py define the fields; the operations (protocol/operations.py), the
client and the broker take them again.  Each is compared with the schema (names, kinds, required-ness,
defaults, choices, bounds: tests/request_fields.py), with every difference named and explained here; then
what the client sends is recorded on the daemon's socket and parsed with the route's schema.  The CLI's
options, the MCP tools' parameters and the skill's options are generated from the operations' fields:
tests/daemon/front/test_edges_round_trip.py drives each of them once per operation instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from daemon.api.requests import AddRequest, MemorySearchRequest, SearchRequest, UpdateRequest
from daemon.common.config import Config, load_config
from daemon.conversation.broker import Broker
from daemon.conversation.reads import Reads
from daemon.conversation.writes import Writes
from daemon.front.cli import main
from daemon.front.daemon_client import DaemonClient
from protocol import operations as op
from protocol.fields import describe
from tests.request_fields import (
    SAMPLES,
    Field,
    Recorder,
    differences,
    parsed,
    schema_fields,
    signature_fields,
)

ADD = schema_fields(AddRequest)
UPDATE = schema_fields(UpdateRequest)
L4_SEARCH = schema_fields(MemorySearchRequest)
L3_SEARCH = schema_fields(SearchRequest)

QUERY = {"query": "q"}  # a caller's "query" is the API's q
IN_THE_PATH = {"memory_id": "names the memory in the route's path (PUT /v1/memories/{memory_id})"}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Iterator[tuple[Config, Recorder]]:
    """A root ``memstrata init`` made, and the recorder listening on its daemon socket."""
    path = tmp_path_factory.mktemp("fields")
    result = CliRunner().invoke(main, ["init", "--root", str(path)])
    assert result.exit_code == 0, result.output
    config = load_config(path / "memstrata.yaml")
    with Recorder(config.paths.socket).serving() as recorder:
        yield config, recorder


# ---------------------------------------------------------------- the places, field by field


def test_the_schemas_are_what_the_api_documents():
    """The comparison's reference itself: the defaults and bounds the routes apply (README.md, "Limits")."""
    assert L3_SEARCH["limit"] == Field("number", default=10, low=1, high=200)
    assert L4_SEARCH["limit"] == Field("number", default=10, low=1, high=100)
    assert L4_SEARCH["fallback"] == Field("flag", default=True)
    assert L3_SEARCH["mode"] == Field("text", default="auto", choices=("auto", "fts", "vector", "hybrid"))
    assert ADD["agent"].required and ADD["text"].required and not ADD["type"].required
    assert ADD["infer"] == Field("flag"), "left to the daemon: on when it has an LLM"


OPERATION_NAMES = {"query": "q", "memory_type": "type"}  # the operations' names of the API's fields


def test_the_operations_take_the_schemas_fields():
    """The clients build the protocol's operations (a misspelled field fails in the caller, the daemon would
    ignore it): their fields, defaults and choices are the schemas' until the schemas are derived from them."""
    pairs = ((op.Add, ADD, {}), (op.Update, UPDATE, IN_THE_PATH), (op.Search, L3_SEARCH, {}))
    for operation, schema, own in (*pairs, (op.MemorySearch, L4_SEARCH, {})):
        fields = signature_fields(operation)
        assert differences(fields, schema, renamed=OPERATION_NAMES, own=own, says_choices=False) == [], operation
        for item in describe(operation):
            if item.wire in schema:
                assert item.choices == schema[item.wire].choices, (operation, item.name)


def test_the_broker_takes_the_schemas_fields():
    """An update and an L4 search as the broker takes them (an add is the operation itself: ``Writes.add(Add)``)."""
    for update in (Writes.update, Broker.update):  # as the agent, whoever's token: no administrator's flag
        assert differences(signature_fields(update), UPDATE, own=IN_THE_PATH, says_choices=False) == []
    for search in (Broker.search, Reads.search):
        assert differences(signature_fields(search), L4_SEARCH, renamed=QUERY, says_choices=False) == [], search


def test_a_difference_is_found():
    """The comparison can fail: each kind of difference a place could drift into is named."""
    place = {
        "agent": Field("text"),  # not required
        "q": Field("number", required=True),
        "limit": Field("number", default=20, low=0, high=100),
        "mode": Field("text", choices=("auto", "fts")),
        "colour": Field("text"),
    }
    assert differences(place, L3_SEARCH) == [
        "colour: taken, but no field of the schema",
        "explain: a field of the schema not taken",
        "layer: a field of the schema not taken",
        "max_tokens: a field of the schema not taken",
        "min_score: a field of the schema not taken",
        "path: a field of the schema not taken",
        "since: a field of the schema not taken",
        "threshold: a field of the schema not taken",
        "until: a field of the schema not taken",
        "agent: optional, not in the schema",
        "limit: default 20, the schema's is 10",
        "limit: low 0, the schema's is 1",
        "limit: high 100, the schema's is 200",
        "mode: choices ('auto', 'fts'), the schema's are ('auto', 'fts', 'vector', 'hybrid')",
        "q: number, the schema's is text",
    ]


# ---------------------------------------------------------------- what each place sends


def _keywords(method, renamed: dict[str, str] | None = None) -> dict[str, object]:
    """Every parameter of ``method`` with a sample value (the API's name looked up through ``renamed``)."""
    renamed = renamed or {}
    return {name: SAMPLES[renamed.get(name, name)] for name in signature_fields(method)}


def test_what_the_client_sends_is_the_schemas_fields(root):
    config, recorder = root
    client = DaemonClient(config.paths.socket)
    for name, operation, schema, model, route in (
        ("add", op.Add, ADD, AddRequest, "/v1/memories"),
        ("search", op.Search, L3_SEARCH, SearchRequest, "/v1/search"),
        ("memory_search", op.MemorySearch, L4_SEARCH, MemorySearchRequest, "/v1/memories/search"),
    ):
        keywords = _keywords(operation, OPERATION_NAMES)
        sent = recorder.one(lambda name=name, keywords=keywords: getattr(client, name)(**keywords))
        assert sent.path == route
        assert parsed(model, sent) == {k: SAMPLES[k] for k in schema}, name
    sent = recorder.one(lambda: client.add("main", SAMPLES["text"], type="fact"))  # the API's name, as before
    assert parsed(AddRequest, sent) == {"agent": "main", "text": SAMPLES["text"], "type": "fact"}
    sent = recorder.one(lambda: client.update(**_keywords(op.Update)))
    assert parsed(UpdateRequest, sent) == {k: SAMPLES[k] for k in UPDATE}
