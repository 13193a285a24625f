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


# --- SkillForge flows -------------------------------------------------------------------------


class ForgeError(DomainError):
    """Base class of the forge app's errors."""

    code = "forge_error"


class FlowInvalid(ForgeError):
    """A start or answer broke a parameter rule; nothing was created or changed."""

    code = "invalid_params"


class FlowNotFound(ForgeError):
    code = "flow_not_found"
    http_status = 404


class FlowAlreadyRunning(ForgeError):
    """The skill already has a flow that has not finished (one flow per skill at a time)."""

    code = "flow_already_running"
    http_status = 409


class FlowWrongState(ForgeError):
    """The flow is not in the state the request needs (`details`: state, needed)."""

    code = "flow_wrong_state"
    http_status = 409


class ApprovalRefused(ForgeError):
    """An approval that does not meet the flow's risk tier (`details`: rule)."""

    code = "approval_refused"
    http_status = 403
