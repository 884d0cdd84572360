"""memstrata's protocol: each operation of the daemon's API defined once, for every edge to build on.

Standard library only, importing nothing of ``daemon`` or ``layers``: the skill runs a copy of this
package under whatever ``python3`` an agent has (daemon/common/skill.py installs it beside the skill's
scripts), and the daemon's own front imports it as it is.  What each module holds:

- :mod:`protocol.vocabulary` the words and id patterns the API takes (memory types, visibilities…);
- :mod:`protocol.limits`     the limits a client checks before sending, and the bounds of result counts;
- :mod:`protocol.fields`     how an operation's field is described (help, wire name, choices, bounds);
- :mod:`protocol.operations` one frozen dataclass per operation, each turning itself into a request;
- :mod:`protocol.lazy_dataclass` how an operation becomes its dataclass when first used (a call pays for one);
- :mod:`protocol.answers`    the answers' types as the clients see them (one definition: the daemon's too);
- :mod:`protocol.json_schema` an answer's type as a JSON Schema (the MCP tools' ``outputSchema``);
- :mod:`protocol.client`     the one client: the AF_UNIX transport, the 429 retry, the errors;
- :mod:`protocol.locations`  where the configuration and the socket are, and how the file is read.
"""
