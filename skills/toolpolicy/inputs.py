"""A skill's inputs: the policy's JSON Schema (draft 2020-12), checked when a run starts.

`schema_problem` is asked when a policy is saved (naming the offending keyword);
`input_errors` when a run or a schedule starts (one entry per failing field, so a 400 can name
them all); `inputs_block` is how valid inputs reach the motor: a structured, fenced JSON block
after the task, not prose pasted into it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from skills.errors import SkillError


@dataclass(frozen=True, slots=True)
class InputError:
    """One failing input: where (a JSON path such as `$.count`), which keyword, and why."""

    field: str
    rule: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "rule": self.rule, "message": self.message}


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """None for a valid draft 2020-12 schema; otherwise a sentence naming the keyword at fault."""
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        # The keyword at fault is the last name on the path into the schema (`type` in
        # {"type": "objec"}); at the root, the meta-schema rule that failed.
        names = [str(p) for p in exc.absolute_path if isinstance(p, str)]
        keyword = names[-1] if names else str(exc.validator or "schema")
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"not a valid JSON Schema: keyword '{keyword}' at {where}: {exc.message}"
    return None


def _path(error: jsonschema.ValidationError) -> str:
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def input_errors(schema: Mapping[str, Any], inputs: Any) -> list[InputError]:
    """Every way `inputs` fails `schema` (empty list: valid), in a stable order.

    A missing required property is reported at the property's own path, so each failing field
    is named (`$.city`, not `$`).
    """
    if not schema:
        return []
    validator = Draft202012Validator(dict(schema))
    errors: list[InputError] = []
    for error in validator.iter_errors(inputs):
        field = _path(error)
        if error.validator == "required" and isinstance(error.validator_value, list):
            instance = error.instance if isinstance(error.instance, dict) else {}
            for name in error.validator_value:
                if name not in instance:
                    errors.append(
                        InputError(
                            field=f"{field}.{name}" if field != "$" else f"$.{name}",
                            rule="required",
                            message=f"'{name}' is required",
                        )
                    )
            continue
        errors.append(InputError(field=field, rule=str(error.validator), message=error.message))
    # jsonschema reports `required` once per missing property, each naming the whole list
    unique = {(e.field, e.rule): e for e in errors}
    return sorted(unique.values(), key=lambda e: (e.field, e.rule))


INPUTS_HEADER = "Inputs of this run (JSON, validated against the skill's input schema):"


def inputs_block(inputs: Mapping[str, Any]) -> str:
    """The structured block appended to the task: a header and a fenced JSON object."""
    body = json.dumps(dict(inputs), sort_keys=True, indent=2, ensure_ascii=False)
    return f"{INPUTS_HEADER}\n```json\n{body}\n```"


class InputsInvalid(SkillError):
    """A run's or a schedule's inputs fail the skill's input schema (400; `details.errors`
    lists each failing field with its rule and message)."""

    code = "inputs_invalid"
    http_status = 400


def check_inputs(schema: Mapping[str, Any], inputs: Any, *, skill: str) -> None:
    """Raise InputsInvalid naming every failing field of `inputs` under `skill`'s schema."""
    errors = input_errors(schema, inputs if inputs is not None else {})
    if errors:
        fields = ", ".join(f"{e.field} ({e.rule})" for e in errors)
        raise InputsInvalid(
            f"inputs of skill {skill!r} do not match its input schema: {fields}.",
            details={"field": "inputs", "errors": [e.to_dict() for e in errors]},
        )
