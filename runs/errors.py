"""Domain errors of the runtime. Each names what was wrong and which rule refused it."""

from __future__ import annotations


class RunError(Exception):
    """Base class; `code` is stable and maps to an API error code."""

    code = "run_error"

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class MotorBusy(RunError):
    """The agent already has an active run (the one-active-run-per-agent rule)."""

    code = "motor_busy"

    def __init__(self, *, run_id: str) -> None:
        super().__init__(
            f"Motor Cortex is busy (run_id: {run_id}). "
            "Wait for it to complete or cancel it via core.task.",
            run_id=run_id,
        )
        self.run_id = run_id


class InvalidRunParams(RunError):
    """A start or control request broke a parameter rule; nothing was created."""

    code = "invalid_params"


class RunNotFound(RunError):
    code = "not_found"


class InvalidTransition(RunError):
    """The run's current status does not allow the requested change; nothing changed."""

    code = "invalid_transition"


class LeaseLost(RunError):
    """This slice no longer holds the run's newest fencing token; its write was refused."""

    code = "lease_lost"


class LLMUnavailable(RunError):
    """The LLM could not be reached or answered with an error after the client's retries."""

    code = "llm_unavailable"


class CredentialResolverFailed(RunError):
    """The credential resolver (MOTOR_CREDENTIAL_RESOLVER) raised; the run fails with this."""

    code = "credential_resolver_failed"


class CredentialsStillMissing(RunError):
    """A run waiting for credentials was asked to go on, but some are still not set."""

    code = "credentials_missing"
