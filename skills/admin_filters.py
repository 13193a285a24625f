"""List filters of the skills admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from skills import approval, selectors
from skills.models import Policy, PolicyStatus
from skills.selectors import policies_to_review

TO_REVIEW = "to_review"


class PolicyStatusFilter(admin.SimpleListFilter):
    """The policy statuses, plus "To review": exactly what the admin's home page counts as
    skills waiting for a person, so its link opens a list of that many rows."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(TO_REVIEW, "To review"), *PolicyStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if value == TO_REVIEW:
            return queryset.filter(pk__in=policies_to_review().values("pk"))
        if value in PolicyStatus.values:
            return queryset.filter(status=value)
        return queryset


class RejectedFilter(admin.SimpleListFilter):
    """Rejected policies stay pending review (seed 000); this tells them apart."""

    title = "rejected"
    parameter_name = "rejected"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", approval.REJECTED_LABEL), ("no", "Not rejected")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Policy]) -> QuerySet[Policy]:
        if self.value() == "yes":
            return queryset.filter(selectors.rejected_q())
        if self.value() == "no":
            return queryset.exclude(selectors.rejected_q())
        return queryset
