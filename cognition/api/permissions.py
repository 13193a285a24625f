"""API permissions: a principal is required; some endpoints are for agents only."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from cognition.principals import Principal


class HasPrincipal(BasePermission):
    """The request was authenticated by one of cognition.api.authentication's schemes."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Principal)
