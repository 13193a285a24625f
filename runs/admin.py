"""The audit and control console for runs.

Runs are read-only models here: every change goes through `runs.services` (respond, approve,
reject, cancel, retry) and its outcome is reported as a message; a refused change shows the
service's error and leaves the run as it was. Attempts, steps, approvals, events and signals are
read-only. Credential values never render: runs only hold credential names, and step arguments
hold the placeholders the model saw.

Viewing needs ``runs.view_motorrun``; acting needs ``runs.change_motorrun``.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator
from django.views.decorators.http import require_POST

from runs import (
    admin_audit,  # noqa: F401 - registers the audit trail page
    services,
)
from runs.accounting import run_usage
from runs.admin_skills import skills_written
from runs.errors import RunError
from runs.host_models import RunPlacement
from runs.models import (
    TERMINAL_STATUSES,
    ApprovalRequest,
    ApprovalStatus,
    Attempt,
    MotorRun,
    RunEvent,
    RunStatus,
    Signal,
    Step,
    StepState,
)
from runs.selectors import run_paused
from skills.admin_json import PrettyJSONMixin

#: the permission that lets a staff user act on runs (answer, approve, reject, cancel, retry)
CONTROL_PERMISSION = "runs.change_motorrun"
#: characters of a tool's output shown in the trace before "show all"
OUTPUT_PREVIEW_CHARS = 600
#: characters of a tool's output the console renders at most (the rest stays in the database)
OUTPUT_FULL_CHARS = 64 * 1024
#: the console polls its live endpoint this often while the run is active, in milliseconds
LIVE_POLL_MS = 2000
ADMIN_CSS = ("runs/console.css",)


def _actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


def status_badge(status: str) -> str:
    try:
        label = RunStatus(status).label
    except ValueError:
        label = status or "none"
    return format_html('<span class="mc-badge mc-badge--{}">{}</span>', status or "none", label)


# --- console data (reads for the run page; kept here, next to their only reader) ---------------


def _progress(iteration: int, maximum: int) -> dict[str, int]:
    maximum = max(1, maximum)
    return {
        "iteration": iteration,
        "max": maximum,
        "percent": min(100, round(100 * iteration / maximum)),
    }


def _step_row(step: Step) -> dict[str, Any]:
    result = step.result or {}
    output = str(result.get("output") or "")
    provenance = str(result.get("provenance") or "")
    return {
        "id": step.pk,
        # Numbers a person reads count from 1 (the model keeps 0-based indexes).
        "attempt": step.attempt.index + 1,
        "iteration": step.iteration,
        "call": step.call_index + 1,
        "tool": step.tool,
        "arguments": json.dumps(step.arguments, indent=2, sort_keys=True, ensure_ascii=False),
        "done": step.state == StepState.DONE,
        "ok": result.get("ok"),
        "error_code": result.get("error_code") or "",
        "provenance": provenance,
        "untrusted": provenance == "web",
        "output_preview": output[:OUTPUT_PREVIEW_CHARS],
        "output_full": output[:OUTPUT_FULL_CHARS],
        "output_truncated": len(output) > OUTPUT_PREVIEW_CHARS,
        "output_cut": len(output) > OUTPUT_FULL_CHARS,
        "output_chars": len(output),
        "duration_ms": step.duration_ms,
        "model": step.model,
        "reasoning": step.reasoning,
    }


def console_state(run: MotorRun) -> dict[str, Any]:
    """Everything the run page shows about one run; placeholders only, never a value."""
    attempts = list(Attempt.objects.filter(run=run).order_by("index"))
    current = next((a for a in attempts if a.index == run.current_attempt_index), None)
    usage = run_usage(run)
    attempt_usage = {row["index"]: row for row in usage["attempts"]}
    attempt_rows = [(attempt, attempt_usage.get(attempt.index, {})) for attempt in attempts]
    steps = list(
        Step.objects.filter(attempt__run=run)
        .select_related("attempt")
        .order_by("attempt__index", "iteration", "call_index")
    )
    pending_approval = (
        ApprovalRequest.objects.filter(run=run, status=ApprovalStatus.PENDING)
        .order_by("-created_at")
        .first()
    )
    approval_view = None
    if pending_approval is not None and run.status == RunStatus.AWAITING_APPROVAL:
        action = pending_approval.action or {}
        approval_view = {
            "id": pending_approval.pk,
            "tool": action.get("tool", ""),
            "arguments": json.dumps(
                action.get("arguments", {}), indent=2, sort_keys=True, ensure_ascii=False
            ),
            "summary": pending_approval.summary,
            "hash": pending_approval.action_hash,
            "expires_at": pending_approval.expires_at,
            "step_id": pending_approval.step_id,
        }
    result = run.result or {}
    stats = result.get("stats") if isinstance(result.get("stats"), dict) else None
    failure = result.get("failure") if isinstance(result.get("failure"), dict) else None
    terminal = run.status in TERMINAL_STATUSES
    paused = None if terminal else run_paused(run_id=run.id)
    fingerprint = "|".join(
        [
            run.status,
            paused["since"] if paused else "",
            str(run.current_attempt_index),
            str(current.iteration if current else 0),
            ",".join(f"{s.pk}:{s.state}" for s in steps),
            str(pending_approval.pk if pending_approval else ""),
        ]
    )
    return {
        "run": run,
        "run_key": quote(run.id),
        "parent_key": quote(run.parent_run_id) if run.parent_run_id else "",
        "status": run.status,
        "status_label": RunStatus(run.status).label,
        "paused": paused,
        "terminal": terminal,
        "attempts": attempts,
        "attempt_rows": attempt_rows,
        "usage": usage,
        "current": current,
        "progress": _progress(
            current.iteration if current else 0,
            current.max_iterations if current else run.max_iterations,
        ),
        "steps": [_step_row(step) for step in steps],
        "question": (
            current.pending_question
            if current is not None and run.status == RunStatus.AWAITING_INPUT
            else ""
        ),
        "missing_credentials": (
            list(run.missing_credentials) if run.status == RunStatus.AWAITING_INPUT else []
        ),
        "approval": approval_view,
        "result": result,
        "result_summary": str(result.get("summary") or ""),
        "skills_written": skills_written(run) if terminal else [],
        "stats": stats,
        "failure": failure,
        "can_cancel": run.status not in TERMINAL_STATUSES,
        "can_retry": (
            run.status == RunStatus.FAILED and run.current_attempt_index + 1 < run.max_attempts
        ),
        "fingerprint": fingerprint,
    }


# --- forms ---------------------------------------------------------------------------------------


class AnswerForm(forms.Form):
    answer = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), strip=True)


class RejectForm(forms.Form):
    approval_id = forms.IntegerField(widget=forms.HiddenInput)
    note = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="Told to the model."
    )


class ApproveForm(forms.Form):
    approval_id = forms.IntegerField(widget=forms.HiddenInput)


class RetryForm(forms.Form):
    guidance = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the next attempt should do differently.",
    )


class CancelForm(forms.Form):
    reason = forms.CharField(required=False, max_length=500)


# --- admin classes -------------------------------------------------------------------------------


class ReadOnlyAdmin(PrettyJSONMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MotorRun)
class MotorRunAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "agent",
        "status_column",
        "task_column",
        "progress_column",
        "attempts_column",
        "trigger",
        "started_at",
        "completed_at",
    )
    list_filter = ("status", "agent", "trigger")
    search_fields = ("id", "task")
    list_select_related = ("agent",)
    show_full_result_count = False

    class Media:
        css = {"all": ADMIN_CSS}

    def get_queryset(self, request: HttpRequest) -> QuerySet[MotorRun]:
        current = Attempt.objects.filter(
            run=OuterRef("pk"), index=OuterRef("current_attempt_index")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                current_iteration=Subquery(current.values("iteration")[:1]),
                current_max_iterations=Subquery(current.values("max_iterations")[:1]),
                paused_reason=Subquery(
                    RunPlacement.objects.filter(run=OuterRef("pk"), paused_at__isnull=False).values(
                        "paused_reason"
                    )[:1]
                ),
            )
        )

    @admin.display(description="status", ordering="status")
    def status_column(self, run: MotorRun) -> str:
        reason = getattr(run, "paused_reason", None)
        if reason and run.status not in TERMINAL_STATUSES:
            # running, but waiting for its infrastructure (runs.placement): said, with the reason
            return format_html(
                '{} <span class="mc-badge mc-badge--paused" title="{}">Paused</span>',
                status_badge(run.status),
                reason,
            )
        return status_badge(run.status)

    @admin.display(description="task")
    def task_column(self, run: MotorRun) -> str:
        return Truncator(run.task).chars(80)

    @admin.display(description="progress")
    def progress_column(self, run: MotorRun) -> str:
        progress = _progress(
            getattr(run, "current_iteration", None) or 0,
            getattr(run, "current_max_iterations", None) or run.max_iterations,
        )
        if run.status in TERMINAL_STATUSES:
            # A finished run has no progress left to show: its share of the budget is no bar.
            used = progress["iteration"]
            return format_html(
                '<span class="mc-meta" title="LLM calls of the last attempt">{} iteration{}</span>',
                used,
                "" if used == 1 else "s",
            )
        return format_html(
            '<span class="mc-progress" title="iterations used / allowed">'
            '<span class="mc-progress__bar"><span style="width: {}%"></span></span>'
            '<span class="mc-progress__text">{}/{}</span></span>',
            progress["percent"],
            progress["iteration"],
            progress["max"],
        )

    @admin.display(description="attempts")
    def attempts_column(self, run: MotorRun) -> str:
        return f"{run.current_attempt_index + 1}/{run.max_attempts}"

    # --- console ---------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        custom = [
            path("<str:object_id>/live/", wrap(self.live_view), name="runs_motorrun_live"),
            path(
                "<str:object_id>/respond/",
                wrap(require_POST(self.respond_view)),
                name="runs_motorrun_respond",
            ),
            path(
                "<str:object_id>/approve/",
                wrap(require_POST(self.approve_view)),
                name="runs_motorrun_approve",
            ),
            path(
                "<str:object_id>/reject/",
                wrap(require_POST(self.reject_view)),
                name="runs_motorrun_reject",
            ),
            path(
                "<str:object_id>/cancel/",
                wrap(require_POST(self.cancel_view)),
                name="runs_motorrun_cancel",
            ),
            path(
                "<str:object_id>/retry/",
                wrap(require_POST(self.retry_view)),
                name="runs_motorrun_retry",
            ),
        ]
        return custom + super().get_urls()

    def _get_run(self, request: HttpRequest, object_id: str) -> MotorRun:
        if not self.has_view_permission(request):
            raise PermissionDenied
        # Admin URLs carry the primary key quoted (`_` becomes `_5F`), as the changelist links do.
        return get_object_or_404(
            MotorRun.objects.select_related("agent", "skill", "skill_version"),
            pk=unquote(object_id),
        )

    def _may_control(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and user.has_perm(CONTROL_PERMISSION))

    def _fragments(self, request: HttpRequest, state: dict[str, Any]) -> dict[str, str]:
        context = {**state, "may_control": self._may_control(request), "opts": self.model._meta}
        return {
            "state": render_to_string("admin/runs/motorrun/_state.html", context, request),
            "trace": render_to_string("admin/runs/motorrun/_trace.html", context, request),
        }

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The change page of a run is its console: read-only facts, trace and the controls.
        run = self._get_run(request, object_id)
        state = console_state(run)
        fragments = self._fragments(request, state)
        context = {
            **self.admin_site.each_context(request),
            **state,
            "title": f"Run {run.id}",
            "opts": self.model._meta,
            "fragments": fragments,
            "live_url": reverse("admin:runs_motorrun_live", args=[quote(run.id)]),
            "poll_ms": LIVE_POLL_MS,
            "media": self.media,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/runs/motorrun/console.html", context)

    def live_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """The console's live state: status, progress and re-rendered panels when changed."""
        run = self._get_run(request, object_id)
        state = console_state(run)
        body: dict[str, Any] = {
            "status": state["status"],
            "status_label": state["status_label"],
            "terminal": state["terminal"],
            "progress": state["progress"],
            "fingerprint": state["fingerprint"],
        }
        if request.GET.get("since") != state["fingerprint"]:
            body["html"] = self._fragments(request, state)
        return JsonResponse(body)

    # --- actions: each calls one service and reports its outcome -----------------------------

    def _act(self, request: HttpRequest, object_id: str) -> MotorRun:
        run = self._get_run(request, object_id)
        if not self._may_control(request):
            raise PermissionDenied
        return run

    def _back(self, run: MotorRun) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:runs_motorrun_change", args=[quote(run.id)]))

    def _report(self, request: HttpRequest, done: str, outcome: dict[str, Any]) -> None:
        messages.success(
            request,
            f"{done} Run {outcome['run_id']}: {outcome['previous_status']} → "
            f"{outcome['new_status']}.",
        )

    def _refused(self, request: HttpRequest, what: str, exc: RunError) -> None:
        messages.error(request, f"{what} refused: {exc.message}")

    def _invalid(self, request: HttpRequest, form: forms.Form) -> None:
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items())
        messages.error(request, f"Nothing changed: {problems}")

    def respond_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._act(request, object_id)
        form = AnswerForm(request.POST)
        if not form.is_valid():
            self._invalid(request, form)
            return self._back(run)
        try:
            outcome = services.run_respond(
                run_id=run.id, answer=form.cleaned_data["answer"], actor=_actor(request)
            )
        except RunError as exc:
            self._refused(request, "Answer", exc)
        else:
            self._report(request, "Answer sent.", dict(outcome))
        return self._back(run)

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._act(request, object_id)
        form = ApproveForm(request.POST)
        if not form.is_valid():
            self._invalid(request, form)
            return self._back(run)
        try:
            outcome = services.run_approve(
                run_id=run.id, approval_id=form.cleaned_data["approval_id"], actor=_actor(request)
            )
        except RunError as exc:
            self._refused(request, "Approval", exc)
        else:
            if outcome["new_status"] == RunStatus.FAILED:
                messages.warning(
                    request,
                    f"The approval had expired; run {run.id} failed "
                    f"({outcome['previous_status']} → failed).",
                )
            else:
                self._report(request, "Action approved.", dict(outcome))
        return self._back(run)

    def reject_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._act(request, object_id)
        form = RejectForm(request.POST)
        if not form.is_valid():
            self._invalid(request, form)
            return self._back(run)
        try:
            outcome = services.run_reject(
                run_id=run.id,
                approval_id=form.cleaned_data["approval_id"],
                note=form.cleaned_data["note"],
                actor=_actor(request),
            )
        except RunError as exc:
            self._refused(request, "Rejection", exc)
        else:
            self._report(request, "Action rejected.", dict(outcome))
        return self._back(run)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._act(request, object_id)
        form = CancelForm(request.POST)
        if not form.is_valid():
            self._invalid(request, form)
            return self._back(run)
        reason = form.cleaned_data["reason"] or f"cancelled in the admin by {_actor(request)}"
        try:
            outcome = services.run_cancel(run_id=run.id, actor=_actor(request), reason=reason)
        except RunError as exc:
            self._refused(request, "Cancel", exc)
        else:
            self._report(request, "Cancelled.", dict(outcome))
        return self._back(run)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._act(request, object_id)
        form = RetryForm(request.POST)
        if not form.is_valid():
            self._invalid(request, form)
            return self._back(run)
        try:
            outcome = services.run_retry(
                run_id=run.id, guidance=form.cleaned_data["guidance"], actor=_actor(request)
            )
        except RunError as exc:
            self._refused(request, "Retry", exc)
        else:
            self._report(request, "New attempt started.", dict(outcome))
        return self._back(run)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = (
        "run",
        "number",
        "status",
        "iteration",
        "max_iterations",
        "llm_calls",
        "prompt_tokens",
        "completion_tokens",
        "energy_cost",
        "started_at",
    )
    list_filter = ("status",)
    search_fields = ("run__id",)

    @admin.display(description="attempt", ordering="index")
    def number(self, attempt: Attempt) -> int:
        return attempt.index + 1


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("attempt", "iteration", "call", "tool", "state", "duration_ms")
    list_filter = ("state", "tool")
    list_select_related = ("attempt",)
    search_fields = ("attempt__run__id",)
    show_full_result_count = False

    @admin.display(description="call", ordering="call_index")
    def call(self, step: Step) -> int:
        return step.call_index + 1


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "status", "expires_at", "decided_at", "decided_by")
    list_filter = ("status",)
    search_fields = ("run__id",)


@admin.register(Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "run", "agent", "payload_status", "created_at")
    list_filter = ("kind", "agent")
    search_fields = ("run__id",)
    list_select_related = ("agent", "run")
    show_full_result_count = False

    @admin.display(description="status")
    def payload_status(self, signal: Signal) -> str:
        status = (signal.payload or {}).get("status") if isinstance(signal.payload, dict) else None
        return status_badge(str(status)) if status else "-"


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "from_status", "to_status", "actor", "created_at")
    search_fields = ("run__id", "actor")
    show_full_result_count = False


# Registers the artifacts admin (its own module: a list and a download view).
from runs import admin_artifacts  # noqa: E402, F401
