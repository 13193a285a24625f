"""REST endpoints of the built-in brain's conversations (validate, call cognition.brain.services,
serialize).

Who may see what: a human sees the conversations they hold with agents they may act for; an agent
token sees its own agent's conversations. Anything else is a 404.

Posting a message plays one turn synchronously and answers 201 with every message the turn
added. The turn acts as the poster: a human (session or personal token) is the principal and
passes the consent gate; an agent token posting on its user's behalf passes it only when the
agent is trusted for relayed consent (see cognition.brain.engine).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.brain import services as brain
from cognition.models import Conversation, ConversationStatus, Message, MessageRole, TurnTrigger
from cognition.selectors import agent_for_human

from . import fields
from .pagination import CursorPage, page_params
from .views import PrincipalAPIView, _errors

# --- serializers ---------------------------------------------------------------------------------


class ConversationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField(source="agent.name")
    user = serializers.CharField(source="user.username")
    title = serializers.CharField()
    # A plain string: another "status" enum already names the run statuses in the schema.
    status = serializers.CharField(help_text=f"One of {', '.join(ConversationStatus.values)}.")
    pending_run_id = serializers.CharField(
        help_text="The run whose question awaits the user's answer (empty when idle)."
    )
    pending_question = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ConversationPageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = ConversationSerializer(many=True)


class ConversationCreateSerializer(serializers.Serializer):
    agent = fields.Text(
        required=False,
        allow_blank=True,
        default="",
        max_length=100,
        help_text="Humans: the agent (id or name); optional when you own exactly one. Agents: "
        "omit (a conversation of an agent is held by its owner).",
    )
    title = fields.Text(required=False, allow_blank=True, default="", max_length=200)


class ToolCallSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.CharField(help_text="The JSON text the model produced.")


class MessageSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    role = serializers.ChoiceField(choices=MessageRole.choices)
    trigger = serializers.ChoiceField(choices=TurnTrigger.choices)
    text = serializers.CharField()
    tool_calls = ToolCallSerializer(many=True)
    tool_call_id = serializers.CharField()
    tool_name = serializers.CharField()
    tool_result = serializers.JSONField(allow_null=True)
    event = serializers.JSONField(
        allow_null=True,
        help_text="System events: {type: motor_result | skill_review | skill_approved | "
        "schedule_skipped | turn_error, …}.",
    )
    author = serializers.CharField(source="author.username", allow_null=True, default=None)
    signal_id = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()


class MessagePageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = MessageSerializer(many=True)


class MessageCreateSerializer(serializers.Serializer):
    text = fields.Text(
        max_length=brain.MAX_MESSAGE_CHARS, help_text="What the user says to the agent."
    )


class PostedMessagesSerializer(serializers.Serializer):
    messages = MessageSerializer(many=True, help_text="Every message the turn added, in order.")


# --- views ---------------------------------------------------------------------------------------


class _NewestFirst(CursorPage):
    ordering = "-id"


class _OldestFirst(CursorPage):
    ordering = "id"
    page_size = 100
    max_page_size = 500


class ConversationListView(PrincipalAPIView):
    pagination_class = _NewestFirst

    @extend_schema(
        operation_id="conversations_list",
        summary="Conversations you hold with the built-in brain (newest first)",
        parameters=[
            *page_params(),
        ],
        responses={200: ConversationPageSerializer, **_errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        rows = brain.conversations_visible_to(principal=self.principal(request))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(ConversationSerializer(page, many=True).data)

    @extend_schema(
        operation_id="conversations_create",
        summary="Start a conversation with an agent",
        request=ConversationCreateSerializer,
        responses={201: ConversationSerializer, **_errors(400, 401, 404)},
    )
    def post(self, request: Request) -> Response:
        body = ConversationCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        principal = self.principal(request)
        ref = body.validated_data["agent"] or None
        if principal.agent is not None:
            agent = self.scope_agent(request) if ref is None else _own(principal.agent, ref)
            user = principal.agent.owner
        else:
            agent = agent_for_human(user=principal.user, ref=ref)
            user = principal.user
        conversation = brain.conversation_start(
            agent=agent, user=user, title=body.validated_data["title"], actor=principal
        )
        return Response(ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)


def _own(agent: Any, ref: str) -> Any:
    from cognition.errors import AgentNotFound

    if ref not in (str(agent.pk), agent.name):
        raise AgentNotFound(f"No agent {ref!r} that you may act for.", details={"agent": ref})
    return agent


class ConversationDetailView(PrincipalAPIView):
    @extend_schema(
        operation_id="conversations_retrieve",
        summary="One conversation: status and the pending motor question",
        responses={200: ConversationSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation = brain.conversation_get(
            principal=self.principal(request), conversation_id=conversation_id
        )
        return Response(ConversationSerializer(conversation).data)


class ConversationMessagesView(PrincipalAPIView):
    pagination_class = _OldestFirst

    @extend_schema(
        operation_id="conversations_messages_list",
        summary="The conversation's messages, oldest first",
        parameters=[
            *page_params(default=100, maximum=500),
        ],
        responses={200: MessagePageSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request, conversation_id: int) -> Response:
        conversation: Conversation = brain.conversation_get(
            principal=self.principal(request), conversation_id=conversation_id
        )
        rows = Message.objects.filter(conversation=conversation).select_related("author")
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response(MessageSerializer(page, many=True).data)

    @extend_schema(
        operation_id="conversations_messages_create",
        summary="Say something to the agent; plays one turn and returns what it added",
        description=(
            "The turn runs before the response (up to COGNITION_TURN_BUDGET_SECONDS). The poster "
            "is the turn's principal for the consent gate: a human passes; an agent token passes "
            "only when its agent is trusted for relayed consent. 409 conversation_busy when "
            "another turn holds the conversation."
        ),
        request=MessageCreateSerializer,
        responses={201: PostedMessagesSerializer, **_errors(400, 401, 404, 409)},
    )
    def post(self, request: Request, conversation_id: int) -> Response:
        principal = self.principal(request)
        brain.conversation_get(principal=principal, conversation_id=conversation_id)
        body = MessageCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        added = brain.conversation_post_message(
            conversation_id=conversation_id, text=body.validated_data["text"], actor=principal
        )
        return Response(
            {"messages": MessageSerializer(added, many=True).data},
            status=status.HTTP_201_CREATED,
        )
