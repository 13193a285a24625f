"""REST endpoints of schedules (recurring skill runs): validate, call cognition.schedules, serialize.

- GET/POST /api/v1/schedules/, GET/PATCH/DELETE /api/v1/schedules/{id}/,
  POST /api/v1/schedules/{id}/enable/ and /disable/, GET /api/v1/schedules/{id}/occurrences/.
- Creating, changing and enabling a schedule are consent-gated (schedule.create, schedule.update,
  schedule.enable): a human passes; an agent token passes only with X-Motor-Trigger: user_message
  and relayed consent trusted. Disabling and deleting are not gated: they only stop runs.
- Another agent's schedule is not found (404), like a missing one.
- Bad input is a 400 schedule_invalid whose details name the field and the rule; nothing is
  written (no schedule, no beat row).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from cognition import schedules as svc
from cognition.models import Schedule, ScheduleOutcome, ScheduleSkipReason
from cognition.schedule_selectors import (
    occurrence_data,
    schedule_data,
    schedule_for_agent,
    schedules_attach_last_occurrences,
    schedules_for_agent,
)

from . import fields
from .pagination import CursorPage, page_params
from .serializers import _page_of
from .views import AGENT_PARAM, MAX_BIGINT, TRIGGER_PARAM, PrincipalAPIView, _errors

# --- serializers ---------------------------------------------------------------------------------


class ScheduleWriteSerializer(serializers.Serializer):
    skill = fields.Text(help_text="Name of one of the agent's skills.")
    # Blank and whitespace-only text reach the service, which names the rule (task: not_empty).
    task = fields.Text(
        allow_blank=True, trim_whitespace=False, help_text="What each run should accomplish."
    )
    inputs = serializers.DictField(
        required=False, allow_null=True, help_text="JSON object handed to each run with the task."
    )
    crontab = fields.Text(
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="Five fields: minute hour day-of-month month day-of-week (e.g. '0 7 * * mon-fri').",
    )
    interval_seconds = fields.Integer(
        required=False, allow_null=True, help_text="Fire every N seconds (N >= 1)."
    )
    timezone = fields.Text(
        required=False, help_text="IANA time zone the crontab is read in; default UTC."
    )
    enabled = fields.Boolean(required=False, help_text="Default true.")


class OccurrenceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    fired_at = serializers.DateTimeField()
    outcome = serializers.ChoiceField(choices=ScheduleOutcome.values)
    reason = serializers.ChoiceField(choices=ScheduleSkipReason.values, allow_null=True)
    detail = serializers.CharField(allow_blank=True)
    run_id = serializers.CharField(allow_null=True)
    signal_id = serializers.IntegerField(allow_null=True)


class ScheduleSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField()
    skill = serializers.CharField()
    task = serializers.CharField()
    inputs = serializers.DictField()
    crontab = serializers.CharField(allow_null=True)
    interval_seconds = serializers.IntegerField(allow_null=True)
    timezone = serializers.CharField()
    enabled = serializers.BooleanField()
    periodic_task = serializers.CharField(
        allow_null=True, help_text="Name of the django-celery-beat PeriodicTask row."
    )
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    last_occurrence = OccurrenceSerializer(allow_null=True)
    next_fire_at = serializers.DateTimeField(
        allow_null=True, help_text="When beat fires it next; null while disabled."
    )


SchedulePageSerializer = _page_of(ScheduleSerializer, "SchedulePageSerializer")
OccurrencePageSerializer = _page_of(OccurrenceSerializer, "OccurrencePageSerializer")


class ScheduleCursorPagination(CursorPage):
    ordering = "id"


class OccurrenceCursorPagination(ScheduleCursorPagination):
    ordering = "-id"  # newest first


PAGE_PARAMS = page_params()


# --- views ---------------------------------------------------------------------------------------


class ScheduleView(PrincipalAPIView):
    def schedule(self, request: Request, schedule_id: int) -> Schedule:
        agent = self.scope_agent(request)
        if schedule_id > MAX_BIGINT:
            schedule_id = 0  # not an id any row can have: reported as not found
        return schedule_for_agent(agent=agent, schedule_id=schedule_id)


class ScheduleListView(ScheduleView):
    @extend_schema(
        operation_id="schedules_list",
        summary="The agent's schedules with their last outcome and next fire time",
        parameters=[AGENT_PARAM, *PAGE_PARAMS],
        responses={200: SchedulePageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        paginator = ScheduleCursorPagination()
        page = paginator.paginate_queryset(schedules_for_agent(agent=agent), request, view=self)
        rows = schedules_attach_last_occurrences(list(page or []))
        return paginator.get_paginated_response([schedule_data(s) for s in rows])

    @extend_schema(
        operation_id="schedules_create",
        summary="Schedule recurring runs of a skill (consent-gated)",
        description=(
            "Give exactly one of crontab and interval_seconds. Each fire re-checks the skill "
            "(approved, content unchanged, credentials set, agent not busy, energy) and either "
            "starts a run with trigger=schedule or records a skipped occurrence and emits a "
            "schedule_skipped signal."
        ),
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=ScheduleWriteSerializer,
        responses={201: ScheduleSerializer, **_errors(400, 401, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        self.gate(request, "schedule.create")
        body = ScheduleWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        schedule = svc.schedule_create(
            agent=agent,
            skill=data["skill"],
            task=data["task"],
            inputs=data.get("inputs"),
            crontab=data.get("crontab"),
            interval_seconds=data.get("interval_seconds"),
            timezone=data.get("timezone", "UTC"),
            enabled=data.get("enabled", True),
            actor=self.principal(request),
        )
        return Response(schedule_data(schedule), status=status.HTTP_201_CREATED)


class ScheduleDetailView(ScheduleView):
    @extend_schema(
        operation_id="schedules_retrieve",
        summary="One schedule",
        parameters=[AGENT_PARAM],
        responses={200: ScheduleSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, schedule_id: int) -> Response:
        return Response(schedule_data(self.schedule(request, schedule_id)))

    @extend_schema(
        operation_id="schedules_update",
        summary="Change a schedule's fields (consent-gated)",
        description=(
            "Fields left out keep their value. Giving crontab replaces an interval and the other "
            "way round."
        ),
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=ScheduleWriteSerializer(partial=True),
        responses={200: ScheduleSerializer, **_errors(400, 401, 403, 404)},
    )
    def patch(self, request: Request, schedule_id: int) -> Response:
        schedule = self.schedule(request, schedule_id)
        self.gate(request, "schedule.update")
        body = ScheduleWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(body.validated_data)
        updated = svc.schedule_update(schedule=schedule, actor=self.principal(request), **fields)
        return Response(schedule_data(updated))

    @extend_schema(
        operation_id="schedules_delete",
        summary="Delete a schedule with its occurrences and its beat row",
        parameters=[AGENT_PARAM],
        request=None,
        responses={204: None, **_errors(401, 404)},
    )
    def delete(self, request: Request, schedule_id: int) -> Response:
        schedule = self.schedule(request, schedule_id)
        svc.schedule_delete(schedule=schedule, actor=self.principal(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScheduleEnableView(ScheduleView):
    @extend_schema(
        operation_id="schedules_enable",
        summary="Enable a schedule (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=None,
        responses={200: ScheduleSerializer, **_errors(401, 403, 404)},
    )
    def post(self, request: Request, schedule_id: int) -> Response:
        schedule = self.schedule(request, schedule_id)
        self.gate(request, "schedule.enable")
        enabled = svc.schedule_enable(schedule=schedule, actor=self.principal(request))
        return Response(schedule_data(enabled))


class ScheduleDisableView(ScheduleView):
    @extend_schema(
        operation_id="schedules_disable",
        summary="Disable a schedule; beat stops firing it",
        parameters=[AGENT_PARAM],
        request=None,
        responses={200: ScheduleSerializer, **_errors(401, 404)},
    )
    def post(self, request: Request, schedule_id: int) -> Response:
        schedule = self.schedule(request, schedule_id)
        disabled = svc.schedule_disable(schedule=schedule, actor=self.principal(request))
        return Response(schedule_data(disabled))


class ScheduleOccurrenceListView(ScheduleView):
    @extend_schema(
        operation_id="schedules_occurrences",
        summary="Each time the schedule fired: the run it started or why it started none",
        parameters=[AGENT_PARAM, *PAGE_PARAMS],
        responses={200: OccurrencePageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request, schedule_id: int) -> Response:
        schedule = self.schedule(request, schedule_id)
        paginator = OccurrenceCursorPagination()
        page = paginator.paginate_queryset(schedule.occurrences.all(), request, view=self)
        return paginator.get_paginated_response([occurrence_data(o) for o in page])
