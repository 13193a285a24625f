"""API authentication: every successful scheme sets `request.auth` to a `Principal`.

- `Authorization: Bearer mc_…` — an agent's API token (cognition.selectors.agent_by_token).
- `Authorization: Bearer mcp_…` — a human's personal access token.
- The admin's session cookie (with CSRF on unsafe methods) — a human.

For an agent, `request.user` is an `AgentUser` stand-in with no permissions of its own, so
nothing that checks `request.user` can mistake an agent for its owner.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from cognition.models import Agent
from cognition.principals import Principal
from cognition.selectors import agent_by_token, user_by_personal_token
from cognition.services import PERSONAL_TOKEN_PREFIX


class AgentUser(AnonymousUser):
    """`request.user` of an agent principal: authenticated, but never staff or superuser."""

    def __init__(self, agent: Agent) -> None:
        super().__init__()
        self.agent = agent

    @property
    def is_anonymous(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_authenticated(self) -> bool:  # type: ignore[override]
        return True

    def get_username(self) -> str:
        return f"agent:{self.agent.name}"

    def __str__(self) -> str:
        return self.get_username()


class MalformedAuthorization(exceptions.AuthenticationFailed):
    """401: the Authorization header is not `<scheme> <credentials>` in ASCII."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.details = {"rule": "authorization_header_format"}


class BearerAuthentication(authentication.BaseAuthentication):
    """Agent API tokens and human personal access tokens as `Authorization: Bearer <token>`."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        raw_header = authentication.get_authorization_header(request)
        if not raw_header:
            return None
        # Every scheme is ASCII text; anything else (a lone byte that decodes to Unicode
        # whitespace, blanks only) can name no scheme and no token.
        parts = raw_header.decode("latin-1").split() if raw_header.isascii() else []
        if not parts:
            raise MalformedAuthorization(
                "Malformed Authorization header: expected ASCII text 'Bearer <token>'."
            )
        if parts[0].lower() != self.keyword.lower():
            return None
        if len(parts) != 2:
            raise MalformedAuthorization(
                "Malformed Authorization header: expected 'Bearer <token>'."
            )
        raw = parts[1]
        if raw.startswith(PERSONAL_TOKEN_PREFIX):
            user = user_by_personal_token(raw=raw)
            if user is None:
                raise exceptions.AuthenticationFailed("Invalid or revoked personal token.")
            return user, Principal.for_human(user)
        agent = agent_by_token(raw=raw)
        if agent is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked agent token.")
        return AgentUser(agent), Principal.for_agent(agent)

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) to unauthenticated calls.
        return f'{self.keyword} realm="api"'


class PrincipalSessionAuthentication(authentication.SessionAuthentication):
    """The admin's session (CSRF-checked on unsafe methods), as a human principal."""

    def authenticate(self, request: Request) -> tuple[AbstractBaseUser, Principal] | None:
        result = super().authenticate(request)
        if result is None:
            return None
        user = result[0]
        return user, Principal.for_human(user)


class BearerScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "cognition.api.authentication.BearerAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent API token (mc_…) or a personal access token (mcp_…).",
        }


class SessionScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "cognition.api.authentication.PrincipalSessionAuthentication"
    name = "cookieAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
