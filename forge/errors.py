"""Domain errors of the forge app (the API maps them to 400/409)."""

from __future__ import annotations


class DeployError(Exception):
    """A version cannot be deployed (not an MCP skill, not approved, its server failed)."""


class ServerStateError(Exception):
    """A management action does not fit the server's state (nothing deployed, wrong status)."""
