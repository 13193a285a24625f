"""A credential resolver for tests, named by MOTOR_CREDENTIAL_RESOLVER (a vault stand-in)."""

from __future__ import annotations

SECRET_VALUE = "s3cr3t-VALUE-7f1e9a"


def resolve(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]:
    return {name: SECRET_VALUE for name in names}


def broken(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]:
    """A resolver whose backing store fails; its message quotes what it read."""
    raise RuntimeError(f"vault unreadable near {SECRET_VALUE}")


def nothing(*, agent_id: int, run_id: str, names: list[str]) -> dict[str, str]:
    """A vault in which nobody has set anything."""
    return {}
