"""Strict request fields: a value of the wrong JSON type is refused, never converted.

DRF's fields coerce (an integer where text is expected becomes "7", "true" becomes True, "5"
becomes 5), so a request the schema calls invalid was accepted. These fields take exactly the JSON
type the schema documents, and `Text` documents what it refuses: NUL characters (PostgreSQL cannot
store them) and, unless blank is allowed, text that is empty or only whitespace.
"""

from __future__ import annotations

import math
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from skills.toolpolicy import manifests

#: Every character Python's str.strip() removes (what DRF trims), as a regex class body.
WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
NO_NUL_PATTERN = "^[^\x00]*$"
NOT_BLANK_PATTERN = f"^[^\x00]*[^\x00{WHITESPACE}][^\x00]*$"


class Text(serializers.CharField):
    """A JSON string; blank (empty or whitespace only) only with allow_blank."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class Integer(serializers.IntegerField):
    """A JSON integer (1.0 counts, as in JSON Schema); not a boolean, a string or 1.5."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not (math.isfinite(data) and data.is_integer()):
            self.fail("invalid")
        return int(super().to_internal_value(int(data)))


class Number(serializers.FloatField):
    """A JSON number; not a boolean or a string."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return float(super().to_internal_value(data))


class Boolean(serializers.BooleanField):
    """true or false; not 1, "true" or "yes"."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class ToolName(Text):
    """The name of a tool a run may be granted. The OpenAPI description lists the grantable set
    as the manifests define it (skills.toolpolicy.manifests.GRANTABLE); a name outside it is
    refused by the grant's own check, whose message names that set."""

    enum = manifests.GRANTABLE


class TextSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    target_class = "cognition.api.fields.Text"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        enum = getattr(self.target, "enum", None)
        if enum is not None:
            schema["enum"] = list(enum)
        elif direction == "request":
            schema["pattern"] = NO_NUL_PATTERN if self.target.allow_blank else NOT_BLANK_PATTERN
        return schema


class QueryInteger(serializers.IntegerField):
    """An integer query parameter written as digits ("5", "-2"); not "5.0", " 5" or "null"."""

    def to_internal_value(self, data: Any) -> int:
        if not (isinstance(data, str) and data.lstrip("-").isdigit() and data.isascii()):
            self.fail("invalid")
        return int(super().to_internal_value(data))
