"""Restoring an agent's energy through the API: staff only, as a person (session or personal
token), never with an agent's own token. The admin's "Restore energy" action does the same."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from cognition import energy
from cognition.energy import RESTORE_PERMISSION, may_restore_energy
from cognition.errors import AgentNotFound, StaffRequired
from cognition.models import Agent

from . import fields
from .serializers import AgentSerializer
from .views import HumanAPIView, _agent_data, _errors


class EnergyRestoreSerializer(serializers.Serializer):
    level = fields.Number(
        required=False,
        default=1.0,
        min_value=0.0,
        max_value=1.0,
        help_text="Energy to set, 0.0-1.0 (default 1.0, fully rested).",
    )


class RestoredEnergySerializer(AgentSerializer):
    previous_energy = serializers.FloatField(help_text="The level before the restore.")


def _agent(ref: str) -> Agent:
    agent = None
    if ref.isascii() and ref.isdigit() and len(ref) <= 18:
        agent = Agent.objects.filter(pk=int(ref)).first()
    if agent is None and len(ref) <= 100 and "\x00" not in ref:
        agent = Agent.objects.filter(name=ref).first()
    if agent is None:
        raise AgentNotFound(f"No agent {ref!r}.", details={"agent": ref})
    return agent


class AgentEnergyRestoreView(HumanAPIView):
    @extend_schema(
        operation_id="agents_energy_restore",
        summary="Restore an agent's energy (staff only; recorded in the agent's admin history)",
        request=EnergyRestoreSerializer,
        responses={200: RestoredEnergySerializer, **_errors(400, 401, 403, 404)},
    )
    def post(self, request: Request, ref: str) -> Response:
        user = self.human(request)
        # the body is read first, so an oversized or non-JSON body is refused as such (413/415)
        # like on every other endpoint, whoever sends it
        body = EnergyRestoreSerializer(data=request.data)
        if not may_restore_energy(user):
            raise StaffRequired(
                "Restoring an agent's energy needs a staff user with the "
                f"{RESTORE_PERMISSION} permission.",
                details={"permission": RESTORE_PERMISSION},
            )
        body.is_valid(raise_exception=True)
        agent = _agent(ref)
        previous = energy.energy_level(agent=agent)
        restored = energy.energy_restore(
            agent=agent, actor=user, level=body.validated_data["level"]
        )
        return Response({**_agent_data(restored), "previous_energy": previous})
