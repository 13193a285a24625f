"""A credential resolver for tests, named by MOTOR_CREDENTIAL_RESOLVER (a vault stand-in)."""

from __future__ import annotations

SECRET_VALUE = "s3cr3t-VALUE-7f1e9a"


def resolve(*, agent_id: int, names: list[str]) -> dict[str, str]:
    return {name: SECRET_VALUE for name in names}
