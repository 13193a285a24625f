"""Schedules in the admin console: create and edit with a crontab or an interval, enable and
disable, see the last outcome, the next fire time and every occurrence.

Saving, enabling, disabling and deleting go through cognition.schedules, so the schedule and its
django-celery-beat PeriodicTask always change together. A human in the admin is the consent the
API's gate asks for.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from cognition.models import Agent, Schedule, ScheduleOccurrence
from cognition.schedule_selectors import (
    last_occurrence_subquery,
    schedule_last_occurrence,
    schedule_next_fire,
)
from cognition.schedule_validation import ScheduleInvalid, schedule_validate
from cognition.schedules import (
    schedule_create,
    schedule_delete,
    schedule_disable,
    schedule_enable,
    schedule_update,
)

# service field name -> form field name
_FORM_FIELD = {"skill": "skill_name"}


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = (
            "agent",
            "skill_name",
            "task",
            "inputs",
            "crontab",
            "interval_seconds",
            "timezone",
            "enabled",
        )
        labels = {"skill_name": "Skill"}
        help_texts = {
            "crontab": "Five fields: minute hour day-of-month month day-of-week, e.g. "
            "'0 7 * * mon-fri'. Leave empty to use an interval.",
            "interval_seconds": "Fire every N seconds (at least 1). Leave empty to use a crontab.",
            "timezone": "IANA time zone the crontab is read in, e.g. Europe/Berlin.",
            "inputs": "A JSON object handed to each run with the task.",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        agent = data.get("agent")
        if agent is None or self.errors:
            return data
        try:
            schedule_validate(
                agent=agent,
                skill=data.get("skill_name"),
                task=data.get("task"),
                inputs=data.get("inputs"),
                crontab=data.get("crontab") or None,
                interval_seconds=data.get("interval_seconds"),
                timezone=data.get("timezone"),
                enabled=bool(data.get("enabled")),
            )
        except ScheduleInvalid as exc:
            field = str(exc.details.get("field", ""))
            rule = exc.details.get("rule", "")
            self.add_error(_FORM_FIELD.get(field, field) or None, f"{exc.message} (rule: {rule})")
        return data


class OccurrenceInline(admin.TabularInline):
    model = ScheduleOccurrence
    fields = ("fired_at", "outcome", "reason", "detail", "run_link", "signal")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-fired_at", "-id")
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Run")
    def run_link(self, obj: ScheduleOccurrence) -> str:
        if not obj.run_id:
            return "-"
        try:
            url = reverse("admin:runs_motorrun_change", args=[quote(obj.run_id)])
        except Exception:  # the runs admin may not register a change page
            return str(obj.run_id)
        return format_html('<a href="{}">{}</a>', url, obj.run_id)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = (
        "id",
        "agent",
        "skill_name",
        "timing",
        "enabled",
        "last_outcome",
        "next_fire_time",
    )
    list_filter = ("enabled", "agent")
    search_fields = ("skill_name", "task", "agent__name")
    list_select_related = ("agent", "periodic_task", "periodic_task__crontab")
    readonly_fields = (
        "last_outcome",
        "next_fire_time",
        "beat_row",
        "created_by_label",
        "created_at",
        "updated_at",
    )
    inlines = [OccurrenceInline]
    actions = ["enable_schedules", "disable_schedules"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # the latest occurrence rides along with each row, so the list costs no query per row
        rows = (
            super()
            .get_queryset(request)
            .annotate(
                last_occurrence_outcome=last_occurrence_subquery("outcome"),
                last_occurrence_fired_at=last_occurrence_subquery("fired_at"),
                last_occurrence_reason=last_occurrence_subquery("reason"),
            )
        )
        if request.user.is_superuser:
            return rows
        return rows.filter(agent__owner=request.user)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "agent" and not request.user.is_superuser:
            kwargs["queryset"] = Agent.objects.filter(owner=request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        # A schedule being added has no occurrences yet.
        return [OccurrenceInline] if obj is not None else []

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        editable = list(ScheduleForm.Meta.fields)
        if obj is None:
            return editable
        return [*editable, *self.readonly_fields]

    @admin.display(description="When")
    def timing(self, obj: Schedule) -> str:
        return obj.when

    @admin.display(description="Last outcome")
    def last_outcome(self, obj: Schedule) -> str:
        if hasattr(obj, "last_occurrence_fired_at"):
            outcome = obj.last_occurrence_outcome
            fired_at = obj.last_occurrence_fired_at
            reason = obj.last_occurrence_reason
        else:
            last = schedule_last_occurrence(schedule=obj)
            outcome, fired_at, reason = (
                (last.outcome, last.fired_at, last.reason) if last else (None, None, None)
            )
        if fired_at is None:
            return "never fired"
        text = f"{outcome} at {fired_at:%Y-%m-%d %H:%M:%S %Z}"
        if reason:
            text += f" ({reason})"
        return text

    @admin.display(description="Next fire time")
    def next_fire_time(self, obj: Schedule) -> str:
        upcoming = schedule_next_fire(schedule=obj)
        if upcoming is None:
            return "disabled"
        return f"{upcoming:%Y-%m-%d %H:%M:%S %Z}"

    @admin.display(description="Beat row")
    def beat_row(self, obj: Schedule) -> str:
        if obj.periodic_task_id is None:
            return "-"
        url = reverse("admin:django_celery_beat_periodictask_change", args=[obj.periodic_task_id])
        return format_html('<a href="{}">{}</a>', url, obj.periodic_task.name)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        data = form.cleaned_data
        fields = {
            "skill": data["skill_name"],
            "task": data["task"],
            "inputs": data.get("inputs"),
            "crontab": data.get("crontab") or None,
            "interval_seconds": data.get("interval_seconds"),
            "timezone": data["timezone"],
            "enabled": bool(data.get("enabled")),
        }
        if change:
            saved = schedule_update(schedule=obj, actor=request.user, **fields)
        else:
            saved = schedule_create(agent=data["agent"], actor=request.user, **fields)
        obj.pk = saved.pk
        obj.periodic_task = saved.periodic_task
        obj.created_at = saved.created_at
        obj.updated_at = saved.updated_at

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        schedule_delete(schedule=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            schedule_delete(schedule=schedule, actor=request.user)

    @admin.action(description="Enable the selected schedules")
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            schedule_enable(schedule=schedule, actor=request.user)
        self.message_user(request, f"Enabled {len(queryset)} schedule(s).", messages.SUCCESS)

    @admin.action(description="Disable the selected schedules")
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            schedule_disable(schedule=schedule, actor=request.user)
        self.message_user(request, f"Disabled {len(queryset)} schedule(s).", messages.SUCCESS)
