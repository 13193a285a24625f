"""Edits that keep a policy's status: giving an agent a policy for a skill, and changing its
fields and credential values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import Model

from skills.crypto import decrypt_json, encrypt_json
from skills.errors import PolicyTransitionNotAllowed, PolicyValidationError
from skills.models import AuditAction, Policy, PolicyStatus, Skill
from skills.policy_fields import _validated_policy_fields
from skills.services import (
    REDACTED,
    Actor,
    _agent_name,
    _audit,
    _lock_skill,
    _lock_skill_and_policy,
    _require_storable,
)


def policy_create(*, skill: Skill | str, agent: Model, actor: Actor) -> Policy:
    """Give `agent` a policy for `skill`; it starts as needs_reapproval (no approved content)."""
    with transaction.atomic():
        locked = (
            _lock_skill(name=skill) if isinstance(skill, str) else _lock_skill(skill_id=skill.pk)
        )
        if Policy.objects.filter(skill=locked, agent=agent).exists():
            raise PolicyTransitionNotAllowed(
                f"Agent {_agent_name(agent)!r} already has a policy for {locked.name!r}.",
                details={"action": "create", "skill": locked.name},
            )
        policy = Policy.objects.create(
            skill=locked, agent=agent, status=PolicyStatus.NEEDS_REAPPROVAL
        )
        _audit(
            action=AuditAction.POLICY_CREATED,
            actor=actor,
            policy=policy,
            to_status=policy.status,
            content_hash=locked.current_version.content_hash if locked.current_version else "",
            version_number=locked.current_version.number if locked.current_version else None,
        )
        return policy


def policy_update(
    *,
    policy: Policy | int,
    actor: Actor,
    allowed_domains: Sequence[str] | None = None,
    required_credentials: Sequence[str] | None = None,
    tools: Sequence[str] | None = None,
    dependencies: Sequence[str] | None = None,
    inputs: Mapping[str, Any] | None = None,
    shell_allowlist: Sequence[str] | None = None,
    set_credentials: Mapping[str, str] | None = None,
    clear_credentials: Iterable[str] | None = None,
    reason: str = "",
) -> Policy:
    """Edit policy fields; the status is kept (seed 000 Scenario 8). `None` leaves a field alone.

    Credential values are write-only: `set_credentials` stores values for names that are in
    required_credentials (after this edit), `clear_credentials` removes names. The audit row
    records field changes, and for credentials only the names.
    """
    given = {
        k: v
        for k, v in {
            "allowed_domains": allowed_domains,
            "required_credentials": required_credentials,
            "tools": tools,
            "dependencies": dependencies,
            "inputs": inputs,
            "shell_allowlist": shell_allowlist,
        }.items()
        if v is not None
    }
    fields = _validated_policy_fields(given, source="policy update")
    _require_storable("reason", reason)
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        changes: dict[str, Any] = {}
        for name, value in fields.items():
            old = getattr(policy, name)
            if old != value:
                changes[name] = {"from": old, "to": value}
                setattr(policy, name, value)
        to_set = dict(set_credentials or {})
        to_clear = sorted(set(clear_credentials or ()))
        if to_set or to_clear:
            bad = sorted(n for n in to_set if n not in policy.required_credentials)
            if bad:
                raise PolicyValidationError(
                    f"Credential {bad[0]!r} is not in required_credentials of {skill.name!r}; "
                    "add the name there first.",
                    details={
                        "field": "credential_values",
                        "rule": "in_required_credentials",
                        "value": bad[0],
                    },
                )
            empty = sorted(n for n, v in to_set.items() if not isinstance(v, str) or not v)
            if empty:
                raise PolicyValidationError(
                    f"Credential {empty[0]!r} needs a non-empty value (use clear to remove it).",
                    details={"field": "credential_values", "rule": "non_empty", "value": empty[0]},
                )
            values = decrypt_json(policy.credential_values)
            cleared = [n for n in to_clear if n in values]
            for n in cleared:
                del values[n]
            values.update(to_set)
            policy.credential_values = encrypt_json(values)
            changes["credential_values"] = {
                **({"set": {n: REDACTED for n in sorted(to_set)}} if to_set else {}),
                **({"cleared": cleared} if cleared else {}),
            }
        if not changes:
            return policy
        policy.save()
        version = skill.current_version
        _audit(
            action=AuditAction.POLICY_UPDATED,
            actor=actor,
            policy=policy,
            from_status=policy.status,
            to_status=policy.status,
            reason=reason,
            content_hash=version.content_hash if version else "",
            version_number=version.number if version else None,
            changes=changes,
        )
        return policy
