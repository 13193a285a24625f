"""Cursor pagination: stable under inserts, opaque `next`/`previous` links."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NameCursorPagination(CursorPagination):
    ordering = "name"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
