"""Each route's request schema is derived from its operation: what the protocol says of a field, the API takes.

daemon/api/requests.py builds every schema of ``SCHEMAS`` from ``protocol.fields.describe(operation)``;
this compares each one with its operation as a caller sees it (the schema's JSON Schema by wire name):
the fields and their wire names, which are required, the defaults, the choices, the bounds of numbers
(a count of results is clamped to them rather than refused) and of texts (length, pattern).
"""

from __future__ import annotations

import pytest

from daemon.api.requests import SCHEMAS
from protocol import operations as op
from protocol.fields import describe

HUGE = 10**9
VALID = {"agent": "main", "q": "q", "text": "t", "execute": True, "path": "/b.tar"}  # the required fields' values


def _form(prop: dict) -> dict:
    """A property's own form (an optional one is ``anyOf: [form, null]``)."""
    forms = [f for f in prop.get("anyOf", [prop]) if f.get("type") != "null"]
    assert len(forms) == 1, prop
    return forms[0]


@pytest.mark.parametrize(("method", "path"), sorted(SCHEMAS))
def test_each_schema_is_its_operations_fields(method, path):
    model = SCHEMAS[method, path]
    operation = model.OPERATION
    assert path == operation.PATH
    assert method == operation.METHOD or (method == "GET" and path.endswith("/search")), "searches take GET too"
    fields = [f for f in describe(operation) if f.where != "path"]
    schema = model.model_json_schema(by_alias=True)
    props = schema["properties"]
    assert list(props) == [f.wire for f in fields]
    assert [model.model_fields[f.name].alias or f.name for f in fields] == [f.wire for f in fields]
    assert set(schema.get("required", ())) == {f.wire for f in fields if f.required}
    required = {f.wire: VALID[f.wire] for f in fields if f.required}
    for item in fields:
        prop, form = props[item.wire], _form(props[item.wire])
        where = f"{operation.__name__}.{item.name}"
        if not item.required:
            assert prop.get("default") == item.default, where
        assert tuple(form["enum"]) == item.choices if item.choices else "enum" not in form, where
        assert form.get("pattern") == item.pattern, where
        assert form.get("maxLength") == item.max_length, where
        assert form.get("minLength") == item.min_length, where
        if item.results is not None:  # clamped to its bounds, not refused
            probe = [getattr(model.model_validate({**required, item.wire: n}), item.name) for n in (-HUGE, HUGE)]
            assert probe == [item.results.low, item.results.high], where
            continue
        low = form.get("exclusiveMinimum" if item.low_exclusive else "minimum")
        assert (low, form.get("maximum")) == (item.low, item.high), where


def test_every_operation_with_fields_has_a_route():
    """Status and Fleet take no field; every other operation is some route's schema."""
    derived = {model.OPERATION for model in SCHEMAS.values()}
    assert derived == {o for o in op.OPERATIONS if describe(o)} == set(op.OPERATIONS) - {op.Status, op.Fleet}
