"""Template tags of the admin's home page."""

from __future__ import annotations

from typing import Any

from django import template

from cognition.admin_home import Awaiting, awaiting_human

register = template.Library()


@register.simple_tag(takes_context=True)
def awaiting_items(context: dict[str, Any]) -> list[Awaiting]:
    """What awaits the logged-in user (see cognition.admin_home)."""
    return awaiting_human(user=context["request"].user)
