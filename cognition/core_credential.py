"""core.credential: set, delete and list the names of an agent's vault credentials. Values are
never returned.
"""

from __future__ import annotations

from typing import Any

from runs.errors import InvalidRunParams

from .errors import CredentialInvalid
from .models import Agent
from .principals import Principal
from .selectors import credential_list_names
from .services import credential_delete, credential_set

CREDENTIAL_ACTIONS = ("set", "delete", "list")


def core_credential(
    *, principal: Principal, agent: Agent, action: str, name: str | None = None, value: Any = None
) -> dict[str, Any]:
    """core.credential: set, delete, list names. Values are never returned."""
    if action not in CREDENTIAL_ACTIONS:
        raise InvalidRunParams(
            f"action: {action!r} is not one of {', '.join(CREDENTIAL_ACTIONS)}", field="action"
        )
    if action == "list":
        return {"names": credential_list_names(agent=agent)}
    if not isinstance(name, str):
        raise CredentialInvalid(
            "A credential name is required.", details={"field": "name", "rule": "required"}
        )
    if action == "set":
        credential = credential_set(agent=agent, name=name, value=value, actor=principal.label)
        return {"name": credential.name, "value": "[set]"}
    credential_delete(agent=agent, name=name, actor=principal.label)
    return {"deleted": name}
