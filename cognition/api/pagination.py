"""Cursor pagination: stable under inserts, opaque `next`/`previous` links.

Every list of the API pages through `CursorPage`: a cursor that is not one this server handed out
(garbled, or a position that cannot be a value of the ordering field) is a 400 naming the
`cursor` parameter, never a 404 or a database error.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Any
from urllib import parse

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

MAX_BIGINT = 2**63 - 1
INVALID_CURSOR = "Invalid cursor: pass the `next` or `previous` link of a page as it was given."


def invalid_cursor() -> ValidationError:
    return ValidationError({"cursor": [INVALID_CURSOR]})


class CursorPage(CursorPagination):
    """CursorPagination whose invalid cursors are 400s (see the module docstring)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def paginate_queryset(
        self, queryset: QuerySet[Any], request: Request, view: Any = None
    ) -> list[Any] | None:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)  # type: ignore[arg-type]

    def get_page_size(self, request: Request) -> int:
        """`page_size` when given: an integer from 1 to max_page_size, else a 400 (never
        silently the default)."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return int(self.page_size)
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= self.max_page_size):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"Must be an integer from 1 to {self.max_page_size}."
                    ]
                }
            )
        return int(raw)

    def decode_cursor(self, request: Request) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        # What encode_cursor writes, read back strictly: base64 of an ASCII query string with
        # o (offset), r (0 or 1) and p (the position), each at most once.
        try:
            text = b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
            if set(tokens) - {"o", "p", "r"} or any(len(v) != 1 for v in tokens.values()):
                raise ValueError(text)
            offset = int(tokens.get("o", ["0"])[0])
            reverse = tokens.get("r", ["0"])[0]
            position = tokens.get("p", [None])[0]
        except (ValueError, UnicodeError, binascii.Error):
            raise invalid_cursor() from None
        if offset < 0 or reverse not in ("0", "1"):
            raise invalid_cursor()
        offset = min(offset, self.offset_cutoff)  # DRF's bound on the cost of a query
        if position is not None:
            self._check_position(position)
        return Cursor(offset=offset, reverse=reverse == "1", position=position)

    def _check_position(self, position: str) -> None:
        """The position must be a value of the ordering's first field, as a database takes it."""
        if "\x00" in position:
            raise invalid_cursor()
        try:
            field = self._model._meta.get_field(self.ordering[0].lstrip("-"))
        except FieldDoesNotExist:
            return  # an annotation: the database compares it as given
        try:
            value = field.to_python(position)
        except (DjangoValidationError, ValueError, TypeError, OverflowError):
            raise invalid_cursor() from None
        if isinstance(value, int) and not -MAX_BIGINT - 1 <= value <= MAX_BIGINT:
            raise invalid_cursor()


class NameCursorPagination(CursorPage):
    ordering = "name"


def page_params(*, default: int = 50, maximum: int = 200) -> list[OpenApiParameter]:
    """The `cursor` and `page_size` query parameters of a paginated list, as documented."""
    return [
        OpenApiParameter(
            "cursor",
            OpenApiTypes.STR,
            description=(
                "Pagination cursor: take it from the `next` or `previous` link as given; an "
                "invalid cursor is a 400."
            ),
        ),
        OpenApiParameter(
            "page_size",
            {"type": "integer", "minimum": 1, "maximum": maximum},
            description=f"Items per page, 1-{maximum}; default {default}; anything else is a 400.",
        ),
    ]
