"""Domain errors of the forge app (the API's one error body maps them: 400, 404, 409)."""

from __future__ import annotations

from skills.errors import DomainError


class DeployError(DomainError):
    """A version cannot be deployed (not an MCP skill, not approved, its server failed)."""

    code = "deploy_failed"
    http_status = 400


class ServerNotFound(DomainError):
    """No deployed MCP server of that skill that the caller may see."""

    code = "server_not_found"
    http_status = 404


class ServerStateError(DomainError):
    """A management action does not fit the server's state (nothing live, wrong status)."""

    code = "server_state"
    http_status = 409
