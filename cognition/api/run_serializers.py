"""Request and response serializers of the runs, oneshot and tools endpoints
(cognition.api.runs): what each accepts and what it answers, as the OpenAPI schema shows."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import (
    DEFAULT_MAX_ITERATIONS,
    MAX_ITERATIONS_CEILING,
    RETRY_MAX_ITERATIONS,
    RunStatus,
)
from skills.toolpolicy import manifests

from . import fields


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
