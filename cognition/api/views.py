"""REST endpoints under /api/v1/: validate, call a service, serialize.

Every endpoint works for one *scope agent*: the calling agent itself, or for a human the agent
named by `?agent=<id or name>` among the agents they own (any agent for a superuser). What belongs
to another agent is reported as not found (404), never as forbidden.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cognition import core, energy
from cognition.consent import TRIGGER_HEADER, USER_MESSAGE
from cognition.core_skill import (
    skill_delete_for,
    skill_detail,
    skill_import_for,
    skill_policy,
    skill_review_facts,
)
from cognition.errors import (
    AgentNotFound,
    HumanRequired,
    NotAnAgent,
    TokenNotFound,
)
from cognition.models import Agent, PersonalToken
from cognition.principals import Principal
from cognition.selectors import (
    agent_for_human,
    agents_visible_to,
    credentials_queryset,
    skills_for_agent,
)
from cognition.services import (
    agent_issue_token,
    agent_revoke_token,
    credential_delete,
    credential_set,
    personal_token_create,
    personal_token_revoke,
)
from cognition.vault import normalize_name
from skills.approval import skill_approve
from skills.models import Policy, PolicyStatus
from skills.policy_edits import policy_update
from skills.reviewing import policy_reject
from skills.services import Actor

from .authentication import BearerAuthentication, PrincipalSessionAuthentication
from .pagination import NameCursorPagination, page_params
from .permissions import HasPrincipal
from .serializers import (
    AgentPageSerializer,
    AgentSerializer,
    ApproveSerializer,
    CredentialPageSerializer,
    CredentialSerializer,
    CredentialWriteSerializer,
    ErrorSerializer,
    IssuedAgentTokenSerializer,
    IssuedPersonalTokenSerializer,
    PersonalTokenCreateSerializer,
    PersonalTokenSerializer,
    RejectSerializer,
    SkillDetailSerializer,
    SkillImportSerializer,
    SkillListItemSerializer,
    SkillPageSerializer,
    SkillReviewSerializer,
    SkillUpdateSerializer,
)

AGENT_PARAM = OpenApiParameter(
    "agent",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description=(
        "Humans: the agent (id or name) whose policies/credentials to act on; optional when "
        "you own exactly one. Agents act on themselves and may omit it."
    ),
)
TRIGGER_PARAM = OpenApiParameter(
    TRIGGER_HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    enum=[USER_MESSAGE, "motor_result", "schedule", "tick"],
    description=(
        "Consent gate: an agent token passes only with 'user_message' and only when the agent is "
        "trusted for relayed consent. Humans need not send it."
    ),
)


# The install rule of skill names (skills.models.Skill's constraint), max 64 characters.
SKILL_NAME_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,62}[a-z0-9])?$")
MAX_BIGINT = 2**63 - 1


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {c: OpenApiResponse(ErrorSerializer, description="Error body") for c in codes}


class PrincipalAPIView(APIView):
    authentication_classes = [BearerAuthentication, PrincipalSessionAuthentication]
    permission_classes = [HasPrincipal]

    def principal(self, request: Request) -> Principal:
        assert isinstance(request.auth, Principal)  # guaranteed by HasPrincipal
        return request.auth

    def scope_agent(self, request: Request) -> Agent:
        principal = self.principal(request)
        ref = request.query_params.get("agent") or None
        if principal.agent is not None:
            own = principal.agent
            if ref and ref not in (str(own.pk), own.name):
                raise AgentNotFound(
                    f"No agent {ref!r} that you may act for.", details={"agent": ref}
                )
            return own
        return agent_for_human(user=principal.user, ref=ref)

    def actor(self, request: Request, *, relayed: bool = False) -> Actor:
        return core.skill_actor(self.principal(request), relayed=relayed)

    def gate(self, request: Request, action: str) -> Actor:
        return core.gate(
            principal=self.principal(request),
            action=action,
            trigger=request.headers.get(TRIGGER_HEADER),
        )

    def policy(self, request: Request, name: str) -> Policy:
        """The scope agent's policy for skill `name`; 404 whether the skill or policy is absent."""
        return skill_policy(agent=self.scope_agent(request), name=name)


def _detail(policy: Policy) -> dict[str, Any]:
    return skill_detail(policy=policy)


# --- skills ----------------------------------------------------------------------------------


class SkillListView(PrincipalAPIView):
    pagination_class = NameCursorPagination

    @extend_schema(
        operation_id="skills_list",
        summary="Skills of the agent, with its policy status for each",
        parameters=[
            AGENT_PARAM,
            OpenApiParameter(
                "status", OpenApiTypes.STR, enum=PolicyStatus.values, description="Policy status."
            ),
            OpenApiParameter(
                "name",
                {"type": "string", "maxLength": 64, "pattern": "^[^\x00]*$"},
                description="Substring of the skill name (at most 64 characters).",
            ),
            *page_params(),
        ],
        responses={200: SkillPageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        status_filter = request.query_params.get("status")
        if status_filter is not None and status_filter not in PolicyStatus.values:
            raise ValidationError({"status": [f"Must be one of {', '.join(PolicyStatus.values)}."]})
        name_filter = request.query_params.get("name") or None
        if name_filter is not None and ("\x00" in name_filter or len(name_filter) > 64):
            raise ValidationError({"name": ["At most 64 characters, no NUL."]})
        skills: QuerySet[Any] = skills_for_agent(
            agent=agent, status=status_filter, name=name_filter
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(skills, request, view=self)
        data = SkillListItemSerializer(page, many=True).data
        return paginator.get_paginated_response(data)

    @extend_schema(
        operation_id="skills_import",
        summary="Import a pasted SKILL.md; it lands as pending_review for the agent",
        parameters=[AGENT_PARAM],
        request=SkillImportSerializer,
        responses={201: SkillDetailSerializer, **_errors(400, 401, 404, 409)},
    )
    def post(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        body = SkillImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = skill_import_for(
            principal=self.principal(request),
            agent=agent,
            text=body.validated_data["skill_md"],
            install_as=body.validated_data.get("name"),
        )
        return Response(_detail(policy), status=status.HTTP_201_CREATED)


class SkillDetailView(PrincipalAPIView):
    @extend_schema(
        operation_id="skills_retrieve",
        summary="One skill as the agent's policy sees it (credential values redacted)",
        parameters=[AGENT_PARAM],
        responses={200: SkillDetailSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(_detail(self.policy(request, name)))

    @extend_schema(
        operation_id="skills_delete",
        summary="Delete the skill (consent-gated)",
        description=(
            "Deletes the skill with its versions and policies; refused with 409 skill_shared when "
            "agents the caller does not act for hold a policy for it."
        ),
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=None,
        responses={204: None, **_errors(401, 403, 404, 409)},
    )
    def delete(self, request: Request, name: str) -> Response:
        policy = self.policy(request, name)
        actor = self.gate(request, "skill.delete")
        skill_delete_for(principal=self.principal(request), policy=policy, actor=actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SkillReviewView(PrincipalAPIView):
    @extend_schema(
        operation_id="skills_review",
        summary="The deterministic review of the skill's current content",
        description=(
            "For a pending_review or needs_reapproval policy this runs the review (status becomes "
            "reviewed); otherwise it returns the stored review."
        ),
        parameters=[AGENT_PARAM],
        responses={200: SkillReviewSerializer, **_errors(401, 404, 409)},
    )
    def get(self, request: Request, name: str) -> Response:
        policy = self.policy(request, name)
        return Response(skill_review_facts(principal=self.principal(request), policy=policy))


class SkillApproveView(PrincipalAPIView):
    @extend_schema(
        operation_id="skills_approve",
        summary="Approve the reviewed skill for the agent (consent-gated)",
        description=(
            "Approves with the proposed policy the review shows (GET …/review/ `proposal`): the "
            "policy as it stands plus the hosts, credentials and tools the content uses that it "
            "does not grant yet — unless a person edited the policy for this content, in which "
            "case the edit stands. The same service decides for the admin and the chat."
        ),
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=ApproveSerializer,
        responses={200: SkillDetailSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, name: str) -> Response:
        policy = self.policy(request, name)
        actor = self.gate(request, "skill.approve")
        body = ApproveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = skill_approve(policy=policy, actor=actor, note=body.validated_data["note"])
        return Response(_detail(policy))


class SkillRejectView(PrincipalAPIView):
    @extend_schema(
        operation_id="skills_reject",
        summary="Decline the skill with a note (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=RejectSerializer,
        responses={200: SkillDetailSerializer, **_errors(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, name: str) -> Response:
        policy = self.policy(request, name)
        actor = self.gate(request, "skill.reject")
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        policy = policy_reject(policy=policy, actor=actor, note=body.validated_data["note"])
        return Response(_detail(policy))


class SkillUpdateView(PrincipalAPIView):
    @extend_schema(
        operation_id="skills_update",
        summary="Edit policy fields; the status is kept (consent-gated)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=SkillUpdateSerializer,
        responses={200: SkillDetailSerializer, **_errors(400, 401, 403, 404)},
    )
    def post(self, request: Request, name: str) -> Response:
        policy = self.policy(request, name)
        actor = self.gate(request, "skill.update")
        body = SkillUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        policy = policy_update(
            policy=policy,
            actor=actor,
            allowed_domains=data.get("domains"),
            required_credentials=data.get("credentials"),
            tools=data.get("tools"),
            dependencies=data.get("dependencies"),
            inputs=data.get("inputs"),
            set_credentials=data.get("credential_values"),
            clear_credentials=data.get("clear_credential_values"),
            reason=data.get("reason", ""),
        )
        return Response(_detail(policy))


# --- credentials -----------------------------------------------------------------------------


class CredentialListView(PrincipalAPIView):
    pagination_class = NameCursorPagination

    @extend_schema(
        operation_id="credentials_list",
        summary="Names of the agent's vault credentials (values are never returned)",
        parameters=[
            AGENT_PARAM,
            *page_params(),
        ],
        responses={200: CredentialPageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(credentials_queryset(agent=agent), request, view=self)
        return paginator.get_paginated_response(CredentialSerializer(page, many=True).data)


CREDENTIAL_NAME_PARAM = OpenApiParameter(
    "name",
    {"type": "string", "pattern": "^([Vv][Aa][Uu][Ll][Tt]_)?[A-Za-z_][A-Za-z0-9_]{0,63}$"},
    OpenApiParameter.PATH,
    description="1-64 ASCII letters, digits and underscores, not starting with a digit; a "
    "VAULT_ prefix is dropped.",
)


class CredentialDetailView(PrincipalAPIView):
    @extend_schema(
        operation_id="credentials_set",
        summary="Store or replace a vault credential (a VAULT_ prefix is dropped)",
        parameters=[AGENT_PARAM, CREDENTIAL_NAME_PARAM],
        request=CredentialWriteSerializer,
        responses={200: CredentialSerializer, **_errors(400, 401, 404)},
    )
    def put(self, request: Request, name: str) -> Response:
        agent = self.scope_agent(request)
        body = CredentialWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        credential = credential_set(
            agent=agent,
            name=name,
            value=body.validated_data["value"],
            actor=self.principal(request).label,
        )
        return Response(CredentialSerializer(credential).data)

    @extend_schema(
        operation_id="credentials_delete",
        summary="Remove a vault credential",
        parameters=[AGENT_PARAM, CREDENTIAL_NAME_PARAM],
        request=None,
        responses={204: None, **_errors(400, 401, 404)},
    )
    def delete(self, request: Request, name: str) -> Response:
        agent = self.scope_agent(request)
        credential_delete(
            agent=agent, name=normalize_name(name), actor=self.principal(request).label
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- agents ----------------------------------------------------------------------------------


def _agent_data(agent: Agent) -> dict[str, Any]:
    level = energy.energy_level(agent=agent)
    return {
        "id": agent.pk,
        "name": agent.name,
        "energy": level,
        "energy_band": energy.band_for(level).value,
        "regen_per_hour": energy.regen_per_hour(),
        "trust_level": agent.trust_level,
        "trusted_for_relayed_consent": agent.trusted_for_relayed_consent,
    }


class AgentMeView(PrincipalAPIView):
    @extend_schema(
        operation_id="agents_me",
        summary="The calling agent: energy, trust level, name",
        responses={200: AgentSerializer, **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        agent = self.principal(request).agent
        if agent is None:
            raise NotAnAgent(
                "/agents/me is for agent tokens; humans list their agents at /api/v1/agents/.",
                details={},
            )
        return Response(_agent_data(agent))


class AgentListView(PrincipalAPIView):
    pagination_class = NameCursorPagination

    @extend_schema(
        operation_id="agents_list",
        summary="Agents the caller may act for (an agent sees only itself)",
        parameters=[
            *page_params(),
        ],
        responses={200: AgentPageSerializer, **_errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        principal = self.principal(request)
        if principal.agent is not None:
            agents = Agent.objects.filter(pk=principal.agent.pk)
        else:
            agents = agents_visible_to(user=principal.user)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(agents, request, view=self)
        return paginator.get_paginated_response([_agent_data(a) for a in page])


# --- tokens (humans only) --------------------------------------------------------------------


class HumanAPIView(PrincipalAPIView):
    def human(self, request: Request) -> Any:
        principal = self.principal(request)
        if principal.agent is not None:
            raise HumanRequired(
                "Tokens are managed by human users (session or personal token), not by agents.",
                details={},
            )
        return principal.user


class AgentTokenView(HumanAPIView):
    @extend_schema(
        operation_id="agents_token_issue",
        summary="Issue a new API token for an agent you own (replaces the old one; shown once)",
        request=None,
        responses={201: IssuedAgentTokenSerializer, **_errors(401, 403, 404)},
    )
    def post(self, request: Request, ref: str) -> Response:
        user = self.human(request)
        agent = agent_for_human(user=user, ref=ref)
        issued = agent_issue_token(agent=agent, actor=user)
        return Response(
            {"agent": agent.name, "token": issued.raw, "prefix": issued.agent.token_prefix},
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        operation_id="agents_token_revoke",
        summary="Revoke an agent's API token; it stops authenticating at once",
        request=None,
        responses={204: None, **_errors(401, 403, 404)},
    )
    def delete(self, request: Request, ref: str) -> Response:
        user = self.human(request)
        agent_revoke_token(agent=agent_for_human(user=user, ref=ref), actor=user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PersonalTokenListView(HumanAPIView):
    @extend_schema(
        operation_id="tokens_list",
        summary="Your personal access tokens (never their values)",
        responses={200: PersonalTokenSerializer(many=True), **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        user = self.human(request)
        tokens = PersonalToken.objects.filter(user=user).order_by("-created_at")
        return Response(PersonalTokenSerializer(tokens, many=True).data)

    @extend_schema(
        operation_id="tokens_create",
        summary="Create a personal access token (its value is shown once)",
        request=PersonalTokenCreateSerializer,
        responses={201: IssuedPersonalTokenSerializer, **_errors(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        user = self.human(request)
        body = PersonalTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = personal_token_create(user=user, name=body.validated_data["name"], actor=user)
        data = dict(PersonalTokenSerializer(issued.token).data)
        data["token"] = issued.raw
        return Response(data, status=status.HTTP_201_CREATED)


class PersonalTokenDetailView(HumanAPIView):
    @extend_schema(
        operation_id="tokens_revoke",
        summary="Revoke one of your personal access tokens",
        request=None,
        responses={204: None, **_errors(401, 403, 404)},
    )
    def delete(self, request: Request, token_id: int) -> Response:
        user = self.human(request)
        token = (
            PersonalToken.objects.filter(pk=token_id, user=user).first()
            if token_id <= MAX_BIGINT
            else None
        )
        if token is None:
            raise TokenNotFound(f"You have no token with id {token_id}.", details={"id": token_id})
        personal_token_revoke(token=token, actor=user)
        return Response(status=status.HTTP_204_NO_CONTENT)
