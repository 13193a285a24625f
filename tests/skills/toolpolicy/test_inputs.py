"""A skill's inputs schema: refused when it is not JSON Schema (naming the keyword), and inputs
checked against it naming each failing field."""

from __future__ import annotations

import json

import pytest

from skills.toolpolicy.inputs import (
    INPUTS_HEADER,
    InputsInvalid,
    check_inputs,
    input_errors,
    inputs_block,
    schema_problem,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}


def test_a_valid_schema_has_no_problem_and_an_invalid_one_names_the_keyword():
    assert schema_problem(SCHEMA) is None
    assert schema_problem({"type": "objec"}) == (
        "not a valid JSON Schema: keyword 'type' at type: 'objec' is not valid under any of "
        "the given schemas"
    )
    assert schema_problem({"type": "object", "properties": {"n": {"minimum": "one"}}}) == (
        "not a valid JSON Schema: keyword 'minimum' at properties/n/minimum: 'one' is not of "
        "type 'number'"
    )


def test_valid_inputs_pass_and_reach_the_motor_as_a_structured_block():
    check_inputs(SCHEMA, {"city": "Berlin", "days": 3}, skill="weather")

    block = inputs_block({"days": 3, "city": "Berlin"})

    header, fence, *body, close = block.splitlines()
    assert (header, fence, close) == (INPUTS_HEADER, "```json", "```")
    assert json.loads("\n".join(body)) == {"city": "Berlin", "days": 3}


def test_every_failing_field_is_named_with_its_rule():
    errors = input_errors(SCHEMA, {"days": "three", "extra": 1})

    assert [(e.field, e.rule) for e in errors] == [
        ("$", "additionalProperties"),
        ("$.city", "required"),
        ("$.days", "type"),
    ]


@pytest.mark.parametrize(
    ("inputs", "fields"),
    [
        ({"city": "Berlin", "days": "3"}, "$.days (type)"),
        ({"city": "Berlin"}, "$.days (required)"),
        ({"city": "", "days": 40}, "$.city (minLength), $.days (maximum)"),
        (None, "$.city (required), $.days (required)"),
    ],
    ids=["wrong-type", "missing-required", "two-fields", "no-inputs"],
)
def test_check_inputs_refuses_with_a_400_naming_each_field(inputs, fields):
    with pytest.raises(InputsInvalid) as caught:
        check_inputs(SCHEMA, inputs, skill="weather")

    assert caught.value.http_status == 400
    assert caught.value.code == "inputs_invalid"
    assert caught.value.message == (
        f"inputs of skill 'weather' do not match its input schema: {fields}."
    )
    assert caught.value.details["field"] == "inputs"


def test_a_skill_without_an_input_schema_takes_any_inputs():
    check_inputs({}, {"anything": [1, 2]}, skill="free")
