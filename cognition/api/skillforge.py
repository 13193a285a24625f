"""REST endpoints of SkillForge (views validate, call `cognition.core_forge`, serialize).

- POST /api/v1/skillforge/ starts a flow (create, or edit/improve a named skill); it answers at
  once with the flow in designing, and a worker carries it on.
- GET /api/v1/skillforge/ lists the agent's flows, newest first; GET …/<flow_id>/ one flow with
  its audit trail.
- POST …/<flow_id>/answer/ | deploy/ | decline/ | cancel/ act on it. Starting, answering,
  deploying and declining pass the consent gate (a human, or an agent relaying its user's words
  when trusted to); deploying also needs the skills approval permission.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.consent import TRIGGER_HEADER
from cognition.core_forge import core_forge
from forge.models import FlowMode

from . import fields
from .views import AGENT_PARAM, TRIGGER_PARAM, PrincipalAPIView, _errors

#: what the schema admits (the service checks the same): host names, vault entry names
HOST_PATTERN = r"^(?:\*\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$"
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"


def _patterned(pattern: str, max_length: int, **kwargs: Any) -> serializers.CharField:
    """A JSON string matching `pattern` (the schema says so, so generated data fits)."""

    @extend_schema_field({"type": "string", "pattern": pattern, "maxLength": max_length})
    class Patterned(serializers.CharField):
        def to_internal_value(self, data: Any) -> str:
            if not isinstance(data, str) or not re.fullmatch(pattern, data):
                raise serializers.ValidationError(f"Must match {pattern}.")
            return data

    return Patterned(max_length=max_length, **kwargs)


def _names(pattern: str, help_text: str = "") -> serializers.ListField:
    """An optional list of at most 20 names (hosts or vault entries) matching `pattern`."""
    return serializers.ListField(
        child=_patterned(pattern, 253),
        max_length=20,
        required=False,
        allow_null=True,
        default=None,
        help_text=help_text,
    )


class FlowCreateSerializer(serializers.Serializer):
    request = fields.Text(max_length=4000, help_text="What the tool should do (or what to change).")
    mode = serializers.ChoiceField(choices=FlowMode.values, default=FlowMode.CREATE)
    skill = _patterned(
        r"^(?:[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?)?$",
        64,
        required=False,
        default="",
        allow_blank=True,
        help_text="edit/improve: the skill to change; create: the name the new skill should get "
        "(lowercase letters, digits, hyphens).",
    )
    allowed_domains = _names(
        HOST_PATTERN, "Hosts the tool may reach ([] for none); asked when absent."
    )
    credentials = _names(
        NAME_PATTERN, "Vault entry names it needs ([] for none; never values); asked when absent."
    )


class FlowAnswerSerializer(serializers.Serializer):
    answer = fields.Text(
        max_length=2000, help_text="Host names, or vault entry names (never values)."
    )


class FlowDeploySerializer(serializers.Serializer):
    confirm_domains = _names(
        HOST_PATTERN, "The domains you confirm, when the flow asks for confirmation."
    )
    note = fields.Text(required=False, default="", allow_blank=True, max_length=2000)


class FlowNoteSerializer(serializers.Serializer):
    note = fields.Text(required=False, default="", allow_blank=True, max_length=2000)


class FlowSerializer(serializers.Serializer):
    flow_id = serializers.CharField()
    mode = serializers.ChoiceField(choices=FlowMode.values)
    state = serializers.CharField()
    skill = serializers.CharField(allow_null=True)
    request = serializers.CharField()
    allowed_domains = serializers.ListField(child=serializers.CharField(), allow_null=True)
    credentials = serializers.ListField(child=serializers.CharField(), allow_null=True)
    question = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField()
    message = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_null=True)
    approval = serializers.DictField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    tools = serializers.ListField(child=serializers.DictField())
    tests_passed = serializers.BooleanField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class FlowListSerializer(serializers.Serializer):
    flows = FlowSerializer(many=True)


class _ForgeView(PrincipalAPIView):
    def forge(self, http: Request, action: str, **kwargs: Any) -> dict[str, Any]:
        return core_forge(
            principal=self.principal(http),
            agent=self.scope_agent(http),
            action=action,
            trigger=http.headers.get(TRIGGER_HEADER),
            **kwargs,
        )


class FlowListView(_ForgeView):
    @extend_schema(
        operation_id="skillforge_list",
        summary="The agent's SkillForge flows, newest first (at most 50)",
        parameters=[AGENT_PARAM],
        responses={200: FlowListSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request) -> Response:
        return Response(self.forge(request, "flows"))

    @extend_schema(
        operation_id="skillforge_create",
        summary="Start a SkillForge flow: generate, test, approve and deploy a tool (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=FlowCreateSerializer,
        responses={201: FlowSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request) -> Response:
        body = FlowCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        action = {"create": "create", "edit": "edit", "improve": "improve"}[data["mode"]]
        flow = self.forge(
            request,
            action,
            request=data["request"],
            name=data["skill"] or None,
            domains=data["allowed_domains"],
            credentials=data["credentials"],
        )
        return Response(flow, status=status.HTTP_201_CREATED)


class FlowDetailView(_ForgeView):
    @extend_schema(
        operation_id="skillforge_retrieve",
        summary="One flow: state, question, approval, tools found, its audit trail",
        parameters=[AGENT_PARAM],
        responses={200: FlowSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, flow_id: str) -> Response:
        return Response(self.forge(request, "flow", flow_id=flow_id))


class FlowAnswerView(_ForgeView):
    @extend_schema(
        operation_id="skillforge_answer",
        summary="Answer the flow's question (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=FlowAnswerSerializer,
        responses={200: FlowSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, flow_id: str) -> Response:
        body = FlowAnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        answer = body.validated_data["answer"]
        return Response(self.forge(request, "answer", flow_id=flow_id, answer=answer))


class FlowDeployView(_ForgeView):
    @extend_schema(
        operation_id="skillforge_deploy",
        summary="Approve the flow's tested version so it deploys (consent-gated; approver)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=FlowDeploySerializer,
        responses={200: FlowSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, flow_id: str) -> Response:
        body = FlowDeploySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        return Response(
            self.forge(
                request,
                "deploy",
                flow_id=flow_id,
                confirm_domains=data["confirm_domains"],
                note=data["note"],
            )
        )


class FlowDeclineView(_ForgeView):
    @extend_schema(
        operation_id="skillforge_decline",
        summary="Decline the flow's version; the flow fails (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=FlowNoteSerializer,
        responses={200: FlowSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, flow_id: str) -> Response:
        body = FlowNoteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        note = body.validated_data["note"]
        return Response(self.forge(request, "decline", flow_id=flow_id, note=note))


class FlowCancelView(_ForgeView):
    @extend_schema(
        operation_id="skillforge_cancel",
        summary="Stop an unfinished flow",
        parameters=[AGENT_PARAM],
        request=None,
        responses={200: FlowSerializer, **_errors(401, 404, 409)},
    )
    def post(self, request: Request, flow_id: str) -> Response:
        return Response(self.forge(request, "cancel", flow_id=flow_id))
