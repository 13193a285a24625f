"""What awaits a human, for the admin's home page: counts with links to the filtered lists.

Each item is shown only to users who may open its list (its model's view permission).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Model
from django.urls import reverse

from cognition.models import DeliveryState, SignalDelivery
from runs.models import MotorRun, RunStatus
from skills.admin_filters import TO_REVIEW
from skills.models import Policy
from skills.selectors import policies_to_review


@dataclass(frozen=True, slots=True)
class Awaiting:
    """One kind of thing waiting for a person: how many, and the list that shows them."""

    key: str
    label: str
    count: int
    url: str


def _list_url(model: type[Model], **filters: str) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    query = "&".join(f"{name}={value}" for name, value in filters.items())
    return f"{url}?{query}" if query else url


def _may_view(user: AbstractBaseUser, model: type[Model]) -> bool:
    opts = model._meta
    return bool(
        user.has_perm(f"{opts.app_label}.view_{opts.model_name}")  # type: ignore[attr-defined]
        or user.has_perm(f"{opts.app_label}.change_{opts.model_name}")  # type: ignore[attr-defined]
    )


def awaiting_human(*, user: AbstractBaseUser) -> list[Awaiting]:
    """The kinds of waiting work `user` may see, in the order a reviewer handles them."""
    items: list[Awaiting] = []
    if _may_view(user, Policy):
        policies = policies_to_review()
        items.append(
            Awaiting(
                key="skills_to_review",
                label="Skills to review",
                count=policies.count(),
                url=_list_url(Policy, status=TO_REVIEW),
            )
        )
    if _may_view(user, MotorRun):
        for key, status, label in (
            ("approvals_pending", RunStatus.AWAITING_APPROVAL, "Runs waiting for an approval"),
            ("runs_awaiting_input", RunStatus.AWAITING_INPUT, "Runs waiting for an answer"),
        ):
            items.append(
                Awaiting(
                    key=key,
                    label=label,
                    count=MotorRun.objects.filter(status=status).count(),
                    url=_list_url(MotorRun, status__exact=status.value),
                )
            )
    if _may_view(user, SignalDelivery):
        items.append(
            Awaiting(
                key="failed_deliveries",
                label="Failed signal deliveries",
                count=SignalDelivery.objects.filter(state=DeliveryState.FAILED).count(),
                url=_list_url(SignalDelivery, state__exact=DeliveryState.FAILED.value),
            )
        )
    return items
