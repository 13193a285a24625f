"""Admin actions on skill policies: disable a skill for an agent without deleting it, enable it
again. Both call `skills.disabling`, which checks the approver's permission and audits."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from skills.disabling import policy_disable, policy_enable
from skills.errors import SkillError
from skills.models import Policy
from skills.services import Actor


def _each(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Policy], what: str, change: Any
) -> None:
    done: list[str] = []
    for policy in queryset.select_related("skill", "agent"):
        label = f"{policy.skill.name} for {policy.agent.name}"
        try:
            change(policy=policy.pk, actor=Actor.from_user(request.user))
        except SkillError as exc:
            modeladmin.message_user(request, f"{label}: {exc.message}", messages.ERROR)
        else:
            done.append(label)
    if done:
        modeladmin.message_user(request, f"{what}: {'; '.join(done)}.", messages.SUCCESS)


@admin.action(description="Disable the skill for its agent (keeps skill and approval)")
def disable_for_agent(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
    _each(
        modeladmin,
        request,
        queryset,
        "Disabled",
        lambda **kwargs: policy_disable(reason="disabled in the admin", **kwargs),
    )


@admin.action(description="Enable the skill again for its agent")
def enable_for_agent(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Policy]) -> None:
    _each(modeladmin, request, queryset, "Enabled", policy_enable)


@admin.display(description="enabled", boolean=True, ordering="disabled_at")
def enabled_column(policy: Policy) -> bool:
    return policy.disabled_at is None
