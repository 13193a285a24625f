"""Domain errors of SkillForge; each names what was wrong and which rule refused it."""

from __future__ import annotations

from skills.errors import DomainError


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
