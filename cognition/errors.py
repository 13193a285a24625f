"""Domain errors of the brain side (vault, energy, consent, scoping).

Built on `skills.errors.DomainError`: a stable `code`, a human `message`, JSON-safe
`details`, and the HTTP status the API's exception handler maps it to.
"""

from __future__ import annotations

from skills.errors import DomainError


class CognitionError(DomainError):
    """Base class of the brain side's errors."""

    code = "cognition_error"


class CredentialInvalid(CognitionError):
    """A credential name or value breaks its rule (`details`: field, rule)."""

    code = "credential_invalid"


class CredentialNotFound(CognitionError):
    code = "credential_not_found"
    http_status = 404


class CredentialsMissing(CognitionError):
    """A run needs credentials that neither the policy nor the vault holds.

    `names` lists them (sorted); the runtime asks the human to enter exactly these.
    """

    code = "credentials_missing"
    http_status = 409

    def __init__(self, names: list[str], *, agent_name: str) -> None:
        self.names = sorted(names)
        super().__init__(
            f"No value is set for credential(s) {', '.join(self.names)} of agent {agent_name!r}: "
            "neither the skill policy nor the vault holds them. A human must enter them "
            "through the admin or PUT /api/v1/credentials/{name}.",
            details={"missing": self.names},
        )


class ConsentRequired(CognitionError):
    code = "consent_required"
    http_status = 403


class EnergyTooLow(CognitionError):
    code = "energy_too_low"
    http_status = 409


class AgentNotFound(CognitionError):
    code = "agent_not_found"
    http_status = 404


class AgentRequired(CognitionError):
    """A human called an agent-scoped endpoint without saying which agent."""

    code = "agent_required"


class NotAnAgent(CognitionError):
    code = "agent_principal_required"
    http_status = 403


class SkillShared(CognitionError):
    """Deleting the skill would remove policies of agents the caller does not act for."""

    code = "skill_shared"
    http_status = 409


class HumanRequired(CognitionError):
    """Only a human user may do this (e.g. issue tokens)."""

    code = "human_required"
    http_status = 403


class TokenNotFound(CognitionError):
    code = "token_not_found"
    http_status = 404


class StaffRequired(CognitionError):
    """Only a staff user with the right permission may do this (e.g. restore an agent's energy)."""

    code = "staff_required"
    http_status = 403
