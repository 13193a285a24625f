"""Domain errors of the skills app.

Each error carries a stable `code`, a human `message` and JSON-safe `details`, plus the HTTP status
the API's exception handler maps it to (400 bad input, 403 permission, 404 missing, 409 state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class DomainError(Exception):
    """Base of the apps' domain errors (skills and cognition): `code`, `message`, `details`,
    `http_status`, and the API error body's inner object from `as_dict()`."""

    code = "domain_error"
    http_status = 400

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def as_dict(self) -> dict[str, Any]:
        """The API error body's inner object."""
        return {"code": self.code, "message": self.message, "details": self.details}

    def describe(self) -> str:
        """The message for a person reading text (a command's output, an admin message): the
        message itself, plus ``[rule]`` when the rule is only in the details."""
        rule = self.details.get("rule")
        if isinstance(rule, str) and rule and f"[{rule}]" not in self.message:
            return f"{self.message} [{rule}]"
        return self.message


class SkillError(DomainError):
    """Base class of the skills app's errors."""

    code = "skill_error"


class SkillNotFound(SkillError):
    code = "skill_not_found"
    http_status = 404


class SkillVersionNotFound(SkillError):
    code = "skill_version_not_found"
    http_status = 404


class PolicyNotFound(SkillError):
    code = "policy_not_found"
    http_status = 404


class SkillValidationError(SkillError):
    """A bundle failed one or more checks; `problems` lists each file and rule.

    `problems` are `skills.bundle.Problem` objects (path, rule, message); `details["problems"]`
    holds the same as JSON.
    """

    code = "skill_invalid"
    http_status = 400

    def __init__(
        self,
        message: str,
        *,
        problems: Iterable[Any] = (),
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.problems = list(problems)
        merged = dict(details or {})
        merged.setdefault(
            "problems",
            [
                {
                    "path": getattr(p, "path", ""),
                    "rule": getattr(p, "rule", ""),
                    "message": getattr(p, "message", str(p)),
                }
                for p in self.problems
            ],
        )
        if self.problems and message.endswith(":"):
            message = (
                message
                + " "
                + "; ".join(
                    f"{d['path'] or '<bundle>'}: {d['message']} [{d['rule']}]"
                    for d in merged["problems"]
                )
            )
        super().__init__(message, details=merged)


class SkillSourceConflict(SkillError):
    """A skill of that name is installed from another source (`details`: rule, name,
    installed_source, source); importing it would silently replace another publisher's skill."""

    code = "skill_source_conflict"
    http_status = 409


class PolicyValidationError(SkillError):
    """A policy field was given a value its rule refuses (`details`: field, rule, value)."""

    code = "policy_invalid"
    http_status = 400


class SkillHashMismatch(SkillError):
    """Stored files no longer hash to what was recorded or approved."""

    code = "skill_hash_mismatch"
    http_status = 409


class PolicyTransitionNotAllowed(SkillError):
    """The policy's status does not allow the requested action."""

    code = "policy_transition_not_allowed"
    http_status = 409


class StaleReview(PolicyTransitionNotAllowed):
    """The review was made for content that is no longer the skill's current version."""

    code = "policy_review_stale"


class SkillDisabled(SkillError):
    """Staff disabled the skill for this agent: no run of it starts until it is enabled."""

    code = "skill_disabled"
    http_status = 409


class ApprovalPermissionDenied(SkillError):
    """The actor is not a staff user holding `skills.approve_policy`."""

    code = "approval_permission_denied"
    http_status = 403


class CredentialsUnreadable(SkillError):
    """Stored credential values cannot be decrypted with the configured keys."""

    code = "credentials_unreadable"
    http_status = 500
