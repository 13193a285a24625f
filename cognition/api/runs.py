"""REST endpoints of runs, oneshot and the core.* tool schemas (views validate, call
`cognition.core`, serialize).

- POST /api/v1/runs/ starts an agentic run (core.act mode "agentic"). An `Idempotency-Key`
  header makes it safe to retry: within 24 h the same key with the same request returns the first
  response (status and body) and creates nothing; the same key with another request is a 409
  idempotency_conflict. Only a created run is remembered: a refused call (busy, energy, …) keeps
  nothing, so retrying it with the same key tries again.
- POST /api/v1/oneshot/ runs a quick Python computation synchronously (core.act mode "oneshot");
  it creates no run, so it takes no Idempotency-Key.
- Run ids of another agent are reported as not found (404).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, QuerySet, Subquery, Sum
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.consent import TRIGGER_HEADER
from cognition.core_act import core_act
from cognition.core_task import core_task, own_run, run_detail
from cognition.models import IdempotencyRecord
from cognition.services import idempotency_ttl
from cognition.tools import core_tool_schemas
from runs.errors import RunError
from runs.models import Attempt, MotorRun, RunStatus, Trigger
from skills.errors import DomainError

from .idempotency import (
    IDEMPOTENCY_HEADER,
    IdempotencyConflict,
    KeyTaken,
    idempotency_key_check,
    remembered_response,
    request_fingerprint,
)
from .pagination import CursorPage, page_params
from .run_serializers import (
    DecisionSerializer,
    OneshotResultSerializer,
    OneshotSerializer,
    RespondSerializer,
    RetrySerializer,
    RunCreatedSerializer,
    RunCreateSerializer,
    RunDetailSerializer,
    RunListItemSerializer,
    RunLogSerializer,
    RunPageSerializer,
    RunRetriedSerializer,
    RunTransitionSerializer,
    ToolSchemaSerializer,
)
from .views import AGENT_PARAM, TRIGGER_PARAM, PrincipalAPIView, _errors

# --- helpers -------------------------------------------------------------------------------------


def _trigger(request: Request) -> str:
    return request.headers.get(TRIGGER_HEADER) or Trigger.API


# What started a run: the consent gate's triggers a run can carry (no "tick").
RUN_TRIGGER_PARAM = OpenApiParameter(
    TRIGGER_HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    enum=list(Trigger.values),
    description=TRIGGER_PARAM.description + " The run records it as its trigger (default api).",
)
RUN_ID_PARAM = OpenApiParameter("run_id", OpenApiTypes.STR, OpenApiParameter.PATH)


class RunCursorPagination(CursorPage):
    ordering = "-created_at"


def _runs_queryset(*, agent_id: int, status_filter: str | None) -> QuerySet[MotorRun]:
    iterations = (
        Attempt.objects.filter(run=OuterRef("pk"))
        .values("run")
        .annotate(total=Sum("iteration"))
        .values("total")
    )
    runs = MotorRun.objects.filter(agent_id=agent_id).select_related("skill")
    if status_filter:
        runs = runs.filter(status=status_filter)
    return runs.annotate(iterations_total=Subquery(iterations))


def _list_item(run: Any) -> dict[str, Any]:
    return {
        "id": run.id,
        "status": run.status,
        "task": run.task,
        "skill": run.skill.name if run.skill_id and run.skill else None,
        "trigger": run.trigger,
        "tools": run.tools,
        "iterations": run.iterations_total or 0,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "completed_at": run.completed_at,
    }


# --- views ---------------------------------------------------------------------------------------


class RunListView(PrincipalAPIView):
    @extend_schema(
        operation_id="runs_list",
        summary="The agent's runs, newest first (cursor pagination, status filter)",
        parameters=[
            AGENT_PARAM,
            OpenApiParameter("status", OpenApiTypes.STR, enum=RunStatus.values),
            *page_params(),
        ],
        responses={200: RunPageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        status_filter = request.query_params.get("status")
        if status_filter is not None and status_filter not in RunStatus.values:
            raise ValidationError({"status": [f"Must be one of {', '.join(RunStatus.values)}."]})
        paginator = RunCursorPagination()
        page = paginator.paginate_queryset(
            _runs_queryset(agent_id=agent.pk, status_filter=status_filter), request, view=self
        )
        data = RunListItemSerializer([_list_item(r) for r in page], many=True).data
        return paginator.get_paginated_response(data)

    @extend_schema(
        operation_id="runs_create",
        summary="Start an agentic run (core.act); returns at once, the result comes as a signal",
        description=(
            "An approved skill runs with its policy's tools, domains and credentials (explicit "
            "tools/domains may only narrow them); a skill in any other status needs explicit "
            "tools and domains. The run's base energy (MOTOR_ENERGY_AGENTIC_BASE, 0.10 by "
            "default) is taken only when it is created; each iteration past the free ones is "
            "paid as it is recorded. "
            "Idempotency-Key: a replay within 24 h returns the first response."
        ),
        parameters=[
            AGENT_PARAM,
            RUN_TRIGGER_PARAM,
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                {"type": "string", "pattern": "^[!-~]{1,255}$"},
                OpenApiParameter.HEADER,
                description="1-255 printable ASCII characters; replays within 24 h are safe.",
            ),
        ],
        request=RunCreateSerializer,
        responses={201: RunCreatedSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        principal = self.principal(request)
        key = request.headers.get(IDEMPOTENCY_HEADER)
        body = RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        trigger = _trigger(request)

        def act(on_created: Any = None) -> dict[str, Any]:
            return core_act(
                principal=principal,
                agent=agent,
                mode="agentic",
                task=data["task"],
                skill=data["skill"],
                tools=data["tools"],
                domains=data["domains"],
                inputs=data["inputs"],
                approval_required=data["approval_required"],
                max_iterations=data["max_iterations"],
                timeout_s=data["timeout_s"],
                skill_review=data["skill_review"],
                trigger=trigger,
                on_created=on_created,
            )

        if key is None:
            return Response(act(), status=status.HTTP_201_CREATED)
        idempotency_key_check(key)
        scope = f"agent:{agent.pk}" if principal.is_agent else f"user:{principal.user.pk}"
        fingerprint = request_fingerprint(request, agent_id=agent.pk, trigger=trigger)
        # No lock: the record is written in the transaction that creates the run, and its unique
        # (scope, key) lets one request win on either database. A concurrent request with the
        # same key then either fails that insert (PostgreSQL waits for the winner's commit) or is
        # refused on the way (the agent is busy, SQLite serialized it after the winner); both
        # find the winner's record and answer its response.
        ttl = idempotency_ttl()
        replay = remembered_response(scope=scope, key=key, fingerprint=fingerprint, ttl=ttl)
        if replay is not None:
            return replay

        def remember(result: dict[str, Any]) -> None:
            try:
                with transaction.atomic():
                    IdempotencyRecord.objects.create(
                        scope=scope,
                        key=key,
                        fingerprint=fingerprint,
                        response_status=status.HTTP_201_CREATED,
                        response_body=result,
                    )
            except IntegrityError:
                raise KeyTaken() from None  # rolls back this request's run and charge

        try:
            return Response(act(remember), status=status.HTTP_201_CREATED)
        except (KeyTaken, DomainError, RunError) as exc:
            replay = remembered_response(scope=scope, key=key, fingerprint=fingerprint, ttl=ttl)
            if replay is not None:
                return replay
            if isinstance(exc, KeyTaken):  # the winner's record expired in between
                raise IdempotencyConflict(
                    f"Idempotency-Key {key!r} was taken by a concurrent request; retry it.",
                    details={"rule": "idempotency_key_race", "key": key},
                ) from None
            raise


class RunDetailView(PrincipalAPIView):
    @extend_schema(
        operation_id="runs_retrieve",
        summary="One run: status, steps, pending question and pending approval",
        parameters=[AGENT_PARAM],
        responses={200: RunDetailSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = own_run(agent=self.scope_agent(request), run_id=run_id)
        return Response(run_detail(run=run))


class _RunActionView(PrincipalAPIView):
    action_name = ""

    def task(self, request: Request, run_id: str, **kwargs: Any) -> dict[str, Any]:
        return core_task(
            principal=self.principal(request),
            agent=self.scope_agent(request),
            action=self.action_name,
            trigger=request.headers.get(TRIGGER_HEADER),
            run_id=run_id,
            **kwargs,
        )


class RunRespondView(_RunActionView):
    action_name = "respond"

    @extend_schema(
        operation_id="runs_respond",
        summary="Answer the run's pending question (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=RespondSerializer,
        responses={200: RunTransitionSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        own_run(agent=self.scope_agent(request), run_id=run_id)
        body = RespondSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(self.task(request, run_id, answer=body.validated_data["answer"]))


class RunCancelView(_RunActionView):
    action_name = "cancel"

    @extend_schema(
        operation_id="runs_cancel",
        summary="Cancel an active run",
        parameters=[AGENT_PARAM],
        request=None,
        responses={200: RunTransitionSerializer, **_errors(401, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        return Response(self.task(request, run_id))


class RunApproveView(_RunActionView):
    action_name = "approve"

    @extend_schema(
        operation_id="runs_approve",
        summary="Approve the run's pending action (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=DecisionSerializer,
        responses={200: RunTransitionSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        own_run(agent=self.scope_agent(request), run_id=run_id)
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(self.task(request, run_id, approval_id=body.validated_data["approval_id"]))


class RunRejectView(_RunActionView):
    action_name = "reject"

    @extend_schema(
        operation_id="runs_reject",
        summary="Refuse the run's pending action; the model is told why (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=DecisionSerializer,
        responses={200: RunTransitionSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        own_run(agent=self.scope_agent(request), run_id=run_id)
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        return Response(
            self.task(request, run_id, approval_id=data["approval_id"], note=data["note"])
        )


class RunRetryView(_RunActionView):
    action_name = "retry"

    @extend_schema(
        operation_id="runs_retry",
        summary="Retry a failed run with guidance (a new attempt, at most 15 iterations)",
        parameters=[AGENT_PARAM],
        request=RetrySerializer,
        responses={200: RunRetriedSerializer, **_errors(400, 401, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        own_run(agent=self.scope_agent(request), run_id=run_id)
        body = RetrySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(self.task(request, run_id, guidance=body.validated_data["guidance"]))


class RunLogView(_RunActionView):
    action_name = "log"

    @extend_schema(
        operation_id="runs_log",
        summary="The last 16 KB of the run's execution log",
        parameters=[AGENT_PARAM],
        responses={200: RunLogSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(self.task(request, run_id))


class OneshotView(PrincipalAPIView):
    @extend_schema(
        operation_id="oneshot_run",
        summary="Run a Python program once in a bare sandbox and return its output (core.act "
        "oneshot; energy 0.05)",
        parameters=[AGENT_PARAM],
        request=OneshotSerializer,
        responses={200: OneshotResultSerializer, **_errors(400, 401, 404, 409)},
    )
    def post(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        body = OneshotSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = core_act(
            principal=self.principal(request),
            agent=agent,
            mode="oneshot",
            task=body.validated_data["code"],
            timeout_s=body.validated_data["timeout_s"],
            trigger=_trigger(request),
        )
        return Response(result)


class ToolListView(PrincipalAPIView):
    @extend_schema(
        operation_id="tools_list",
        summary="The core.* tools as OpenAI function-calling schemas",
        description=(
            "Names use underscores (core_act for core.act, core_task for core.task, core_skill "
            "for core.skill, core_credential for core.credential): OpenAI function names may not "
            "contain dots."
        ),
        responses={200: ToolSchemaSerializer(many=True), **_errors(401)},
    )
    def get(self, request: Request) -> Response:
        schemas = core_tool_schemas()
        agent = self.principal(request).agent
        if agent is not None:
            # the agent's deployed MCP skills, callable through core.act as `<skill>__<tool>`
            from forge.selectors import deployed_tool_schemas

            schemas = [*schemas, *deployed_tool_schemas(agent.pk)]
        return Response(schemas)
