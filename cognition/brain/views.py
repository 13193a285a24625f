"""The chat page: a person talks to their agent (Django templates and a little plain JS).

Every view acts for the logged-in human: messages they send are turns whose principal is that
human (trigger user_message), and the Approve buttons call core.skill approve / core.task approve
as that human. The page polls `chat-state` for new messages and run progress.
"""

from __future__ import annotations

import json
from functools import wraps
from typing import Any

from django.contrib.admin.utils import quote
from django.contrib.auth.views import LoginView
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from cognition.errors import CognitionError
from cognition.models import Conversation, ConversationRun, Message, MessageRole
from cognition.principals import Principal
from cognition.selectors import agents_visible_to
from runs.errors import RunError
from runs.models import Attempt, MotorRun, RunStatus, Step, StepState
from skills.approval import policy_is_rejected
from skills.errors import DomainError
from skills.models import Policy

from . import services
from .errors import ConversationNotFound

#: most runs shown in the progress panel
RUNS_SHOWN = 5
#: what a review card reads for a rejected version (its policy is pending_review with a note)
REJECTED = "rejected"
#: most characters of a step's argument shown as the run's current step
STEP_SUMMARY_CHARS = 80


class ChatLoginView(LoginView):
    template_name = "chat/login.html"
    redirect_authenticated_user = True


def _login_required(view: Any) -> Any:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            if request.headers.get("Accept", "").startswith("application/json"):
                return _error(401, "not_authenticated", "Log in first.")
            return redirect(
                f"{reverse('chat-login')}?{urlencode({'next': request.get_full_path()})}"
            )
        return view(request, *args, **kwargs)

    return wrapped


def _error(status: int, code: str, message: str, details: Any = None) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": code, "message": message, "details": details or {}}}, status=status
    )


def _domain_error(exc: Exception) -> JsonResponse:
    if isinstance(exc, DomainError):
        return _error(exc.http_status, exc.code, exc.message, exc.details)
    if isinstance(exc, RunError):
        status = 404 if exc.code == "run_not_found" else 409
        return _error(status, exc.code, exc.message, {k: str(v) for k, v in exc.details.items()})
    raise exc


def _conversation(request: HttpRequest, conversation_id: int) -> Conversation:
    return services.conversation_get(
        principal=Principal.for_human(request.user), conversation_id=conversation_id
    )


# --- rendering -----------------------------------------------------------------------------------


def _policy_statuses(conversation: Conversation, names: set[Any]) -> dict[str, str]:
    """Skill name → what its card reads: the policy's status, or "rejected" for a version a
    person rejected (seed 000 keeps it in pending_review, with the note)."""
    names.discard(None)
    if not names:
        return {}
    policies = Policy.objects.filter(
        agent=conversation.agent, skill__name__in=names
    ).select_related("skill", "skill__current_version")
    return {
        policy.skill.name: REJECTED if policy_is_rejected(policy) else policy.status
        for policy in policies
    }


def _card_statuses(conversation: Conversation, messages: list[Message]) -> dict[str, str]:
    return _policy_statuses(
        conversation,
        {
            (m.event or {}).get("skill")
            for m in messages
            if m.role == MessageRole.EVENT and (m.event or {}).get("type") == "skill_review"
        },
    )


def _render_messages(
    request: HttpRequest, conversation: Conversation, messages: list[Message]
) -> list[dict[str, Any]]:
    statuses = _card_statuses(conversation, messages)
    out = []
    for message in messages:
        event = message.event or {}
        context = {
            "m": message,
            "event": event,
            "conversation": conversation,
            "card_status": statuses.get(event.get("skill", "")),
            "result_json": json.dumps(message.tool_result, indent=1, sort_keys=True)
            if message.tool_result is not None
            else "",
            "facts": event.get("facts") or {},
            # the run that wrote a reviewed skill (cards recorded before runs were named: none)
            "run_url": _run_url_of(event["run_id"], request.user)
            if event.get("type") == "skill_review" and event.get("run_id")
            else "",
        }
        html = render_to_string("chat/_message.html", context, request=request)
        out.append({"id": message.pk, "role": message.role, "html": html})
    return out


def _skill_statuses(conversation: Conversation) -> dict[str, str]:
    """Each review card's skill → its status now (cards follow approvals made anywhere)."""
    return _policy_statuses(
        conversation,
        {
            (event or {}).get("skill")
            for event in conversation.messages.filter(
                role=MessageRole.EVENT, event__type="skill_review"
            ).values_list("event", flat=True)
        },
    )


def _argument_summary(arguments: Any) -> str:
    """The first string argument of a tool call (a URL, a path, a command), shortened."""
    if isinstance(arguments, dict):
        for value in arguments.values():
            if isinstance(value, str) and value.strip():
                line = value.strip().splitlines()[0]
                return (
                    line
                    if len(line) <= STEP_SUMMARY_CHARS
                    else line[: STEP_SUMMARY_CHARS - 1] + "…"
                )
    return ""


def _current_step(run: MotorRun, attempt: Attempt | None) -> str:
    """What the run is doing now (or did last), in words a person reads."""
    if run.status == RunStatus.AWAITING_INPUT:
        question = attempt.pending_question if attempt else ""
        return f"waiting for an answer: {question}" if question else "waiting for an answer"
    if run.status == RunStatus.AWAITING_APPROVAL:
        return "waiting for an approval"
    step = (
        Step.objects.filter(attempt=attempt).order_by("-iteration", "-call_index").first()
        if attempt
        else None
    )
    if step is None:
        return "starting" if run.is_active else ""
    summary = _argument_summary(step.arguments)
    label = f"{step.tool} {summary}".strip()
    if step.state == StepState.INTENT and run.is_active:
        return f"running {label}"
    return f"last step: {label}"


def _run_url(run: MotorRun, user: Any) -> str:
    """The run's page: the admin's run console for staff who may view runs, else the API."""
    return _run_url_of(run.pk, user)


def _run_url_of(run_id: str, user: Any) -> str:
    if user.is_staff and user.has_perm("runs.view_motorrun"):
        return reverse("admin:runs_motorrun_change", args=[quote(run_id)])
    return f"/api/v1/runs/{run_id}/"


def _runs(conversation: Conversation, user: Any) -> list[dict[str, Any]]:
    """The runs the conversation knows, newest first: those it started ("chat") and those started
    elsewhere (the API, a schedule) whose signals reached it ("elsewhere"), so the panel agrees
    with the run events the conversation shows."""
    heard = Message.objects.filter(conversation=conversation, signal__run__isnull=False).values(
        "signal__run"
    )
    own = ConversationRun.objects.filter(conversation=conversation).values("run")
    runs = (
        MotorRun.objects.filter(agent=conversation.agent)
        .filter(Q(pk__in=own) | Q(pk__in=heard))
        .select_related("conversation_link")
        .order_by("-created_at", "-pk")[:RUNS_SHOWN]
    )
    rows = []
    for run in runs:
        link = getattr(run, "conversation_link", None)
        started_here = link is not None and link.conversation_id == conversation.pk
        attempt = Attempt.objects.filter(run=run, index=run.current_attempt_index).first()
        rows.append(
            {
                "id": run.pk,
                "status": run.status,
                "task": run.task[:120],
                "review": run.review,
                "attempt": run.current_attempt_index + 1,
                "max_attempts": run.max_attempts,
                # LLM calls used so far of those allowed (a count: 1 after the first call)
                "iteration": attempt.iteration if attempt else 0,
                "max_iterations": attempt.max_iterations if attempt else 0,
                "step": _current_step(run, attempt),
                "url": _run_url(run, user),
                "cancel_url": reverse("chat-cancel-run", args=[conversation.pk, run.pk])
                if run.is_active
                else "",
                "origin": "chat" if started_here else "elsewhere",
            }
        )
    return rows


# --- pages ---------------------------------------------------------------------------------------


@_login_required
@require_http_methods(["GET", "POST"])
def chat_index(request: HttpRequest) -> HttpResponse:
    """Your conversations, and a form to start one with an agent you own."""
    agents = agents_visible_to(user=request.user).filter(owner=request.user).order_by("name")
    error = ""
    if request.method == "POST":
        agent = agents.filter(pk=request.POST.get("agent") or 0).first()
        if agent is None:
            error = "Choose one of your agents."
        else:
            conversation = services.conversation_start(
                agent=agent, user=request.user, title=request.POST.get("title", "")[:200]
            )
            return redirect("chat-detail", conversation_id=conversation.pk)
    conversations = services.conversations_visible_to(principal=Principal.for_human(request.user))
    return render(
        request,
        "chat/index.html",
        {"agents": agents, "conversations": conversations[:100], "error": error},
        status=400 if error else 200,
    )


@_login_required
@require_GET
def chat_detail(request: HttpRequest, conversation_id: int) -> HttpResponse:
    try:
        conversation = _conversation(request, conversation_id)
    except ConversationNotFound:
        return render(request, "chat/not_found.html", status=404)
    messages = list(conversation.messages.select_related("author").order_by("id"))
    rendered = _render_messages(request, conversation, messages)
    return render(
        request,
        "chat/detail.html",
        {
            "conversation": conversation,
            "messages_html": rendered,
            "last_id": messages[-1].pk if messages else 0,
            "runs_json": _runs(conversation, request.user),
        },
    )


@_login_required
@require_GET
def chat_state(request: HttpRequest, conversation_id: int) -> JsonResponse:
    """New messages after `?after=<id>` (rendered), the conversation's status and run progress."""
    try:
        conversation = _conversation(request, conversation_id)
    except ConversationNotFound as exc:
        return _domain_error(exc)
    try:
        after = max(0, int(request.GET.get("after") or 0))
    except ValueError:
        return _error(400, "invalid", "after: must be a message id (an integer).")
    messages = list(
        conversation.messages.filter(id__gt=min(after, 2**63 - 1))
        .select_related("author")
        .order_by("id")[:200]
    )
    return JsonResponse(
        {
            "status": conversation.status,
            "pending_question": conversation.pending_question,
            "pending_run_id": conversation.pending_run_id,
            "messages": _render_messages(request, conversation, messages),
            "runs": _runs(conversation, request.user),
            "skills": _skill_statuses(conversation),
        }
    )


@_login_required
@require_POST
def chat_send(request: HttpRequest, conversation_id: int) -> JsonResponse:
    """Say something: plays one turn as the logged-in human; returns the rendered new messages."""
    text = request.POST.get("text")
    if text is None and request.content_type == "application/json":
        try:
            text = json.loads(request.body or b"{}").get("text")
        except (ValueError, AttributeError):
            return _error(400, "malformed_request", "The body must be a JSON object.")
    try:
        conversation = _conversation(request, conversation_id)
        added = services.conversation_post_message(
            conversation_id=conversation.pk, text=text or "", actor=request.user
        )
    except (CognitionError, DomainError, RunError) as exc:
        return _domain_error(exc)
    return JsonResponse({"messages": _render_messages(request, conversation, added)}, status=201)


@_login_required
@require_POST
def chat_approve_skill(request: HttpRequest, conversation_id: int, name: str) -> JsonResponse:
    """A review card's Approve button: core.skill approve as the human who clicked."""
    try:
        conversation = _conversation(request, conversation_id)
        message = services.conversation_approve_skill(
            conversation_id=conversation.pk, skill=name, actor=request.user
        )
    except (CognitionError, DomainError, RunError) as exc:
        return _domain_error(exc)
    return JsonResponse(
        {"messages": _render_messages(request, conversation, [message])}, status=200
    )


@_login_required
@require_POST
def chat_approve_run(request: HttpRequest, conversation_id: int, run_id: str) -> JsonResponse:
    """An approval card's Allow button: core.task approve as the human who clicked."""
    try:
        conversation = _conversation(request, conversation_id)
        message = services.conversation_approve_run_action(
            conversation_id=conversation.pk, run_id=run_id, actor=request.user
        )
    except (CognitionError, DomainError, RunError) as exc:
        return _domain_error(exc)
    return JsonResponse(
        {"messages": _render_messages(request, conversation, [message])}, status=200
    )


@_login_required
@require_POST
def chat_cancel_run(request: HttpRequest, conversation_id: int, run_id: str) -> JsonResponse:
    """The runs panel's Cancel button: core.task cancel as the human who clicked."""
    try:
        conversation = _conversation(request, conversation_id)
        message = services.conversation_cancel_run(
            conversation_id=conversation.pk, run_id=run_id, actor=request.user
        )
    except (CognitionError, DomainError, RunError) as exc:
        return _domain_error(exc)
    return JsonResponse(
        {"messages": _render_messages(request, conversation, [message])}, status=200
    )
