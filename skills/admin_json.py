"""Structured data in the admin's read-only pages, shown the way a person reads it.

Django shows a read-only JSONField as one line of JSON; `PrettyJSONMixin` shows every JSONField
of a read-only admin indented, with sorted keys, in a `<pre>` block instead. Used by the skills,
runs and cognition consoles (skills is the lowest layer all three may import).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

PRETTY_SUFFIX = "__pretty"


def pretty_json(value: Any) -> SafeString:
    """`value` as indented JSON (keys sorted, non-ASCII kept) in an escaped `<pre>`."""
    if value in (None, "", [], {}):
        return format_html('<span class="mc-meta">{}</span>', "—")
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="mc-json">{}</pre>', text)


class PrettyJSONMixin:
    """For read-only ModelAdmins: each JSONField is shown through `pretty_json`."""

    model: type[models.Model]

    def _json_fields(self) -> set[str]:
        return {f.name for f in self.model._meta.get_fields() if isinstance(f, models.JSONField)}

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        names = self._json_fields()
        fields = super().get_fields(request, obj)  # type: ignore[misc]
        return [f"{f}{PRETTY_SUFFIX}" if f in names else f for f in fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        readonly = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        return [*readonly, *(f"{name}{PRETTY_SUFFIX}" for name in sorted(self._json_fields()))]

    def __getattr__(self, name: str) -> Any:
        # Django looks a read-only field's value and label up on the admin by name.
        if not name.endswith(PRETTY_SUFFIX):
            raise AttributeError(name)
        field_name = name.removesuffix(PRETTY_SUFFIX)
        if field_name not in self._json_fields():
            raise AttributeError(name)

        def show(obj: models.Model) -> SafeString:
            return pretty_json(getattr(obj, field_name))

        show.short_description = self.model._meta.get_field(field_name).verbose_name  # type: ignore[attr-defined]
        return show
