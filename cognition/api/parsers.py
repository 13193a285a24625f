"""Request body parsers of the API: DRF's, with a bound on how deeply JSON may nest.

Python parses nested JSON recursively, so a body of a few kilobytes nested thousands deep would
exhaust the interpreter's stack (RecursionError) and anything that walks the data later (the
serializers, json.dumps, the database's JSON columns) would meet the same depth. No request of
this API needs more than a few levels; MAX_JSON_DEPTH leaves ample room for JSON schemas and run
inputs and refuses the rest as a malformed request.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, parsers

#: Most levels of arrays and objects a JSON body may nest (the body itself is level 1).
MAX_JSON_DEPTH = 64


class JSONTooDeep(exceptions.ParseError):
    def __init__(self) -> None:
        super().__init__(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
        self.details = {"rule": "max_json_depth", "limit": MAX_JSON_DEPTH}


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests arrays and objects more than `limit` levels deep (iterative: it
    never recurses, whatever the depth)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class BoundedJSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing bodies nested deeper than MAX_JSON_DEPTH with a 400."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise JSONTooDeep() from None
        if json_depth_exceeds(data, MAX_JSON_DEPTH):
            raise JSONTooDeep()
        return data
