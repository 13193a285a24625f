"""An agent's webhook through the API, for the humans who own it (the admin page does the same).

The signing secret is returned once, in the response that generated it (the first URL, or a
rotation); afterwards the API says only whether one is set and since when.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.errors import HumanRequired
from cognition.models import Agent
from cognition.selectors import agent_for_human
from cognition.webhooks import agent_rotate_webhook_secret, agent_set_webhook

from . import fields
from .views import PrincipalAPIView, _errors


class WebhookSerializer(serializers.Serializer):
    agent = serializers.CharField()
    url = serializers.CharField(help_text="Where signals are POSTed; empty: no webhook.")
    secret_set = serializers.BooleanField()
    secret_created_at = serializers.DateTimeField(allow_null=True)


class WebhookUpdatedSerializer(WebhookSerializer):
    secret = serializers.CharField(
        allow_null=True,
        help_text="The new signing secret when this call generated one (shown once), else null.",
    )


class WebhookWriteSerializer(serializers.Serializer):
    url = fields.Text(
        allow_blank=True,
        max_length=2000,
        help_text="http:// or https:// URL without user name or password; empty to remove.",
    )


class RotatedSecretSerializer(serializers.Serializer):
    agent = serializers.CharField()
    secret = serializers.CharField(help_text="The new signing secret (shown once).")


def _data(agent: Agent) -> dict[str, Any]:
    return {
        "agent": agent.name,
        "url": agent.webhook_url,
        "secret_set": bool(agent.webhook_secret),
        "secret_created_at": agent.webhook_secret_created_at,
    }


class _OwnerView(PrincipalAPIView):
    def owned_agent(self, request: Request, ref: str) -> tuple[Any, Agent]:
        principal = self.principal(request)
        if principal.agent is not None:
            raise HumanRequired(
                "An agent's webhook is configured by its human owner (session or personal "
                "token), not by the agent.",
                details={},
            )
        return principal.user, agent_for_human(user=principal.user, ref=ref)


class AgentWebhookView(_OwnerView):
    @extend_schema(
        operation_id="agents_webhook_get",
        summary="An agent's webhook URL and whether a signing secret is set (never the secret)",
        responses={200: WebhookSerializer, **_errors(401, 403, 404)},
    )
    def get(self, request: Request, ref: str) -> Response:
        _, agent = self.owned_agent(request, ref)
        return Response(_data(agent))

    @extend_schema(
        operation_id="agents_webhook_set",
        summary="Set or remove an agent's webhook URL (the first URL generates the secret)",
        request=WebhookWriteSerializer,
        responses={200: WebhookUpdatedSerializer, **_errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, ref: str) -> Response:
        user, agent = self.owned_agent(request, ref)
        body = WebhookWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = agent_set_webhook(agent=agent, url=body.validated_data["url"], actor=user)
        agent.refresh_from_db()
        return Response({**_data(agent), "secret": issued.raw if issued else None})


class AgentWebhookRotateView(_OwnerView):
    @extend_schema(
        operation_id="agents_webhook_rotate",
        summary="Replace an agent's webhook signing secret (the new one is shown once)",
        request=None,
        responses={201: RotatedSecretSerializer, **_errors(401, 403, 404)},
    )
    def post(self, request: Request, ref: str) -> Response:
        user, agent = self.owned_agent(request, ref)
        issued = agent_rotate_webhook_secret(agent=agent, actor=user)
        return Response({"agent": agent.name, "secret": issued.raw}, status=status.HTTP_201_CREATED)
