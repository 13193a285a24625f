"""What every page of the skills console shares: who is acting, whether they may approve, which
credential values are set, and the console's stylesheet."""

from __future__ import annotations

from django.http import HttpRequest

from skills import selectors, services
from skills.errors import CredentialsUnreadable
from skills.models import Policy

APPROVE_PERMISSION = services.APPROVE_PERMISSION
ADMIN_CSS = ("skills/review.css",)


def _actor(request: HttpRequest) -> services.Actor:
    return services.Actor.from_user(request.user)


def _can_approve(request: HttpRequest) -> bool:
    """Whether to offer approval buttons; the service makes the binding check itself."""
    user = request.user
    return bool(user.is_active and user.is_staff and user.has_perm(APPROVE_PERMISSION))


def credential_names_set(policy: Policy) -> set[str] | None:
    """Names that have a stored value, or None when the values cannot be decrypted."""
    try:
        return set(selectors.policy_credential_names(policy=policy))
    except CredentialsUnreadable:
        return None
