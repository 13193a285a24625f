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

import hashlib
import json
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, QuerySet, Subquery, Sum
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.consent import TRIGGER_HEADER
from cognition.core_act import core_act
from cognition.core_task import core_task, own_run, run_detail
from cognition.errors import CognitionError
from cognition.models import IdempotencyRecord
from cognition.services import idempotency_ttl
from cognition.tools import core_tool_schemas
from runs.errors import RunError
from runs.models import (
    DEFAULT_MAX_ITERATIONS,
    MAX_ITERATIONS_CEILING,
    RETRY_MAX_ITERATIONS,
    Attempt,
    MotorRun,
    RunStatus,
    Trigger,
)
from skills.errors import DomainError
from skills.toolpolicy import manifests

from . import fields
from .pagination import CursorPage, page_params
from .views import AGENT_PARAM, TRIGGER_PARAM, PrincipalAPIView, _errors

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_CHARS = 255


class IdempotencyConflict(CognitionError):
    code = "idempotency_conflict"
    http_status = 409


# --- serializers ---------------------------------------------------------------------------------


class RunCreateSerializer(serializers.Serializer):
    task = fields.Text(help_text="What to accomplish, in natural language.")
    skill = fields.Text(required=False, allow_null=True, default=None)
    tools = serializers.ListField(
        child=fields.ToolName(),
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            f"Tools to grant ({', '.join(manifests.TOOL_IDS)}; aliases "
            f"{', '.join(manifests.ALIASES)}), as GET /api/v1/tools/manifests/ describes them. "
            "For an approved skill: may only narrow the policy's tools."
        ),
    )
    domains = serializers.ListField(
        child=fields.Text(),
        required=False,
        allow_null=True,
        default=None,
        help_text="Domains the sandbox may reach; [] means no network.",
    )
    inputs = serializers.DictField(required=False, allow_null=True, default=None)
    approval_required = fields.Boolean(required=False, default=False)
    max_iterations = fields.Integer(
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            f"Iteration cap of the first attempt: 1..{MAX_ITERATIONS_CEILING} "
            f"(default {DEFAULT_MAX_ITERATIONS}; retries get at most {RETRY_MAX_ITERATIONS})."
        ),
    )
    timeout_s = fields.Integer(required=False, allow_null=True, default=None)
    skill_review = fields.Boolean(
        required=False, default=False, help_text="Only on an X-Motor-Trigger: motor_result call."
    )


class RunCreatedSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    status = serializers.CharField()


class RunListItemSerializer(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.CharField(help_text="Run status: " + " | ".join(RunStatus.values))
    task = serializers.CharField()
    skill = serializers.CharField(allow_null=True)
    trigger = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    iterations = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)


class RunPageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = RunListItemSerializer(many=True)


class _Usage(serializers.Serializer):
    iterations = serializers.IntegerField(help_text="Model replies recorded.")
    llm_calls = serializers.IntegerField(help_text="LLM answers received (replies and hints).")
    tool_calls = serializers.IntegerField(help_text="Tool calls requested (steps).")
    tool_errors = serializers.IntegerField(help_text="Tool calls whose result was not ok.")
    prompt_tokens = serializers.IntegerField(help_text="As the model's answers reported them.")
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    energy_cost = serializers.FloatField(
        help_text="Energy taken (0.0-1.0 scale); a run's includes its start's base, an "
        "attempt's only its paid iterations."
    )


class AttemptUsageSerializer(_Usage):
    index = serializers.IntegerField(help_text="The attempt, counted from 0.")


class RunUsageSerializer(_Usage):
    attempts = AttemptUsageSerializer(many=True, help_text="Each attempt's own numbers.")


class RunDetailSerializer(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.CharField(help_text="Run status: " + " | ".join(RunStatus.values))
    task = serializers.CharField()
    skill = serializers.CharField(allow_null=True)
    review = serializers.BooleanField()
    trigger = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    allowed_domains = serializers.ListField(child=serializers.CharField())
    result = serializers.DictField(allow_null=True)
    attempt = serializers.DictField(
        help_text="The current attempt: index (counts from 0), number (the same, counted from 1 "
        "as the admin and the chat show it), status, iteration (LLM calls made so far), "
        "max_iterations, failure."
    )
    attempts = serializers.IntegerField(help_text="Attempts started so far (1 for a new run).")
    max_attempts = serializers.IntegerField()
    usage = RunUsageSerializer(
        help_text="What the run used so far, over all its attempts (runs.accounting)."
    )
    pending_question = serializers.CharField(allow_null=True)
    missing_credentials = serializers.ListField(
        child=serializers.CharField(),
        help_text="Credential names the run waits for (set them through /api/v1/credentials/).",
    )
    pending_approval = serializers.DictField(allow_null=True)
    paused = serializers.DictField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="While a running run waits for its infrastructure: {reason, since} (e.g. "
        "'snapshot storage unreachable: ...' with several worker hosts); it resumes by itself "
        "once that is back. Null otherwise.",
    )
    steps = serializers.ListField(
        child=serializers.DictField(),
        help_text="Tool calls in order: attempt and call_index count from 0; attempt_number and "
        "call_number are the same counted from 1; iteration is the LLM call that asked for it "
        "(from 1). Each has tool, arguments, state (intent, done), ok, error_code, duration_ms "
        "and output_excerpt: the first 200 characters of the call's output (whitespace folded, "
        "'…' when cut; empty while the call is in flight); GET runs/{id}/log/ has more.",
    )
    created_at = serializers.CharField()
    started_at = serializers.CharField(allow_null=True)
    completed_at = serializers.CharField(allow_null=True)


class RunTransitionSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    previous_status = serializers.CharField()
    new_status = serializers.CharField()


class RunRetriedSerializer(RunTransitionSerializer):
    attempt_index = serializers.IntegerField(
        help_text="The new attempt's index, counted from 0 (the second attempt is 1)."
    )


class RespondSerializer(serializers.Serializer):
    answer = fields.Text(trim_whitespace=False, max_length=20000)


class DecisionSerializer(serializers.Serializer):
    approval_id = fields.Integer(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        help_text="The pending approval's id; defaults to the run's pending approval.",
    )
    note = fields.Text(required=False, allow_blank=True, default="", max_length=2000)


class RetrySerializer(serializers.Serializer):
    guidance = fields.Text(
        required=False, allow_blank=True, default="", max_length=10000, trim_whitespace=False
    )


class RunLogSerializer(serializers.Serializer):
    run_id = serializers.CharField()
    log = serializers.CharField(help_text="The last 16 KB of the execution log.")


class OneshotSerializer(serializers.Serializer):
    code = fields.Text(trim_whitespace=False, help_text="A Python program.")
    timeout_s = fields.Number(
        required=False, default=5.0, min_value=0.001, max_value=5.0, help_text="0.001-5 seconds."
    )


class OneshotResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    result = serializers.CharField()
    duration_ms = serializers.IntegerField()
    error = serializers.CharField(allow_null=True)


class ToolSchemaSerializer(serializers.Serializer):
    type = serializers.CharField()
    function = serializers.DictField()


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


class _KeyTaken(Exception):
    """A concurrent request with the same Idempotency-Key committed its run first."""


def _remembered(*, scope: str, key: str, fingerprint: str, ttl: timedelta) -> Response | None:
    """The first response to `key` when it is still remembered; a conflict when it belongs to
    another request; None when the key is free (an expired record is removed)."""
    record = IdempotencyRecord.objects.filter(scope=scope, key=key).first()
    if record is None:
        return None
    if record.created_at < timezone.now() - ttl:
        IdempotencyRecord.objects.filter(pk=record.pk).delete()  # expired: the key is free again
        return None
    if record.fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was used within the last 24 h for a different "
            "request; use a new key for a new request.",
            details={"rule": "idempotency_key_reuse", "key": key},
        )
    return Response(
        record.response_body,
        status=record.response_status,
        headers={"Idempotent-Replayed": "true"},
    )


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
        if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS or not all(" " < c < "\x7f" for c in key):
            raise ValidationError(
                {IDEMPOTENCY_HEADER: ["1-255 printable ASCII characters without spaces."]}
            )
        scope = f"agent:{agent.pk}" if principal.is_agent else f"user:{principal.user.pk}"
        fingerprint = hashlib.sha256(
            json.dumps(
                {"path": request.path, "agent": agent.pk, "trigger": trigger, "body": request.data},
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()
        # No lock: the record is written in the transaction that creates the run, and its unique
        # (scope, key) lets one request win on either database. A concurrent request with the
        # same key then either fails that insert (PostgreSQL waits for the winner's commit) or is
        # refused on the way (the agent is busy, SQLite serialized it after the winner); both
        # find the winner's record and answer its response.
        ttl = idempotency_ttl()
        replay = _remembered(scope=scope, key=key, fingerprint=fingerprint, ttl=ttl)
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
                raise _KeyTaken() from None  # rolls back this request's run and charge

        try:
            return Response(act(remember), status=status.HTTP_201_CREATED)
        except (_KeyTaken, DomainError, RunError) as exc:
            replay = _remembered(scope=scope, key=key, fingerprint=fingerprint, ttl=ttl)
            if replay is not None:
                return replay
            if isinstance(exc, _KeyTaken):  # the winner's record expired in between
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
