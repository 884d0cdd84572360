"""protocol/json_schema.py: the JSON Schema of each kind of type an answer's TypedDict is made of.

What each schema lets through is checked with jsonschema (the validator the MCP SDK's client holds a tool's
results to), not only what the dict looks like.
"""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from typing import Annotated, Any, Literal, Optional, TypedDict, Union

import pytest
from jsonschema.validators import validator_for

from protocol import answers
from protocol.json_schema import json_schema
from tests.helpers import REPO_ROOT


def accepts(kind: object, value: object) -> bool:
    schema = json_schema(kind)
    validator_for(schema).check_schema(schema)
    return validator_for(schema)(schema).is_valid(value)


class Inner(TypedDict):
    """An object inside another.

    This second paragraph is left out of the description."""

    n: int


class Outer(TypedDict, total=False):
    inner: Inner
    inners: list[Inner]
    maybe: Inner | None


class Both(TypedDict):
    needed: str
    later: typing.NotRequired[int]  # 3.11+ (the venv's); under 3.10 a total=False class says the same


Functional = TypedDict("Functional", {"from": list[str]})


@pytest.mark.parametrize(
    ("kind", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (type(None), {"type": "null"}),
        (Any, {}),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (dict[str, Any], {"type": "object"}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (str | None, {"type": ["string", "null"]}),
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045 (the spelling is what is tested)
        (Union[int, list[int]], {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]}),  # noqa: UP007
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Annotated[int, "a note"], {"type": "integer"}),
        (Any | None, {}),
    ],
)
def test_each_kind_of_type(kind, schema):
    assert json_schema(kind) == schema


def test_a_typeddict_is_an_object_with_its_required_keys_nested_ones_inlined():
    inner = {
        "type": "object",
        "title": "Inner",
        "description": "An object inside another.",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    assert json_schema(Inner) == inner
    outer = json_schema(Outer)
    assert "required" not in outer and "description" not in outer  # total=False; no docstring of its own
    assert outer["properties"] == {
        "inner": inner,
        "inners": {"type": "array", "items": inner},
        "maybe": {"anyOf": [inner, {"type": "null"}]},
    }
    assert json_schema(Both)["required"] == ["needed"]
    assert json_schema(Both)["properties"]["later"] == {"type": "integer"}
    assert json_schema(Functional)["properties"] == {"from": {"type": "array", "items": {"type": "string"}}}


def test_what_a_schema_lets_through():
    assert accepts(Outer, {"inner": {"n": 1}, "maybe": None})
    assert not accepts(Outer, {"inner": {"n": "1"}})
    assert not accepts(Inner, {})
    assert accepts(Inner, {"n": 1, "other": 2})  # open: a key the type does not name yet is no failure
    assert not accepts(Inner, {"n": True})  # a boolean is no JSON integer
    assert accepts(float, 3) and not accepts(int, 3.5)
    assert not accepts(Literal["a", "b"], "c")


def test_a_type_it_does_not_know_is_refused_by_name():
    with pytest.raises(TypeError, match="set"):
        json_schema(set[str])


def test_every_answer_of_the_protocol_has_a_schema():
    kinds = [v for v in vars(answers).values() if typing.is_typeddict(v)]
    assert len(kinds) >= 15
    for kind in kinds:
        schema = json_schema(kind)
        validator_for(schema).check_schema(schema)
        assert schema["title"] == kind.__name__


def test_the_schemas_are_made_under_the_system_python_alone():
    """The skill's copy of the package runs under /usr/bin/python3 with nothing installed (-S: no site)."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    code = "from protocol import answers, json_schema; print(json_schema.json_schema(answers.HistoryAnswer)['title'])"
    out = subprocess.run([python, "-S", "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == "HistoryAnswer"
