"""GET /api/v1/audit/: the scope agent's per-call audit trail (owner or the agent itself), and
GET /api/v1/tools/manifests/: the manifest of every tool a run can be granted."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from runs.audit import RECORD_FIELDS, tool_audit_filter
from runs.audit_models import ToolCallAudit
from skills.toolpolicy import manifests
from skills.toolpolicy.trust import TrustLevel

from .pagination import CursorPage, page_params
from .views import AGENT_PARAM, PrincipalAPIView, _errors


class AuditCursorPagination(CursorPage):
    ordering = "-id"


class ToolCallAuditSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolCallAudit
        fields = ("id", *RECORD_FIELDS)
        read_only_fields = fields


class AuditPageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ToolCallAuditSerializer(many=True)


OUTCOMES = ("ok", "failed")


def _moment(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        moment = parse_datetime(raw)
    except ValueError:
        moment = None
    if moment is None:
        raise ValidationError({name: ["Must be an ISO-8601 date-time, e.g. 2026-01-31T12:00:00Z."]})
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


class AuditListView(PrincipalAPIView):
    @extend_schema(
        operation_id="audit_list",
        summary="The agent's tool-call audit trail, newest first (cursor pagination, filters)",
        parameters=[
            AGENT_PARAM,
            OpenApiParameter("skill", OpenApiTypes.STR, description="Only this skill's calls."),
            OpenApiParameter("tool", OpenApiTypes.STR, enum=list(manifests.TOOL_IDS)),
            OpenApiParameter("outcome", OpenApiTypes.STR, enum=list(OUTCOMES)),
            OpenApiParameter("since", OpenApiTypes.DATETIME, description="Created at or after."),
            OpenApiParameter("until", OpenApiTypes.DATETIME, description="Created before."),
            *page_params(),
        ],
        responses={200: AuditPageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        outcome = request.query_params.get("outcome")
        if outcome is not None and outcome not in OUTCOMES:
            raise ValidationError({"outcome": [f"Must be one of {', '.join(OUTCOMES)}."]})
        tool = request.query_params.get("tool")
        if tool is not None and tool not in manifests.TOOL_IDS:
            raise ValidationError({"tool": [f"Must be one of {', '.join(manifests.TOOL_IDS)}."]})
        queryset = tool_audit_filter(
            ToolCallAudit.objects.filter(agent_ref_id=agent.pk),
            skill=request.query_params.get("skill") or None,
            tool=tool,
            outcome=outcome,
            since=_moment(request, "since"),
            until=_moment(request, "until"),
        )
        paginator = AuditCursorPagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(ToolCallAuditSerializer(page, many=True).data)


class ToolManifestSerializer(serializers.Serializer):
    id = serializers.ChoiceField(choices=list(manifests.TOOL_IDS))
    name = serializers.CharField()
    description = serializers.CharField()
    category = serializers.ChoiceField(choices=[c.value for c in manifests.Category])
    inputs = serializers.JSONField(help_text="JSON Schema (draft 2020-12) of the arguments.")
    outputs = serializers.JSONField(help_text="JSON Schema of the result envelope.")
    risk = serializers.ChoiceField(choices=[r.value for r in manifests.Risk])
    cost = serializers.ChoiceField(choices=[c.value for c in manifests.Cost])
    min_trust_level = serializers.ChoiceField(choices=[t.value for t in TrustLevel])
    requires_approval = serializers.BooleanField()
    allowed_directories = serializers.ListField(child=serializers.CharField())
    command_whitelist = serializers.ListField(child=serializers.CharField())
    host_side = serializers.BooleanField()


class ToolManifestListView(PrincipalAPIView):
    @extend_schema(
        operation_id="tool_manifests_list",
        summary="The manifest of every tool a run can be granted (risk, cost, trust, schemas)",
        responses={200: ToolManifestSerializer(many=True), **_errors(401)},
    )
    def get(self, request: Request) -> Response:
        return Response([m.to_dict() for m in manifests.MANIFESTS.values()])
