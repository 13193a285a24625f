"""One slice of a flow: the work of its current state, done under a fenced lease.

`flow_advance` is what the Celery task calls. It claims the flow, does the state's slow part
outside any transaction (the LLM call, the sandbox test, the deployment), and records the
outcome in one short transaction fenced by the lease token. A slice repeated after a worker was
killed redoes the state's work from the database (nothing of it was recorded), so each state is
idempotent: the LLM is asked again, the test runs again, the deployment is asked again (itself
idempotent per version). Crash points for the worker tests are named ``forge_<state>``.
"""

from __future__ import annotations

import logging
from typing import Any

import openai
from django.apps import apps
from django.conf import settings
from django.db import transaction

from runs.crashpoints import crash_point
from runs.errors import LLMUnavailable
from runs.llm import ModelRole, llm_chat, llm_client
from skills.approval import domain_covered

from . import design, generation
from .approving import after_tests_passed
from .bundles import BundleRefused, bundle_check, manifest_of, version_texts
from .flow_services import save_and_record
from .lease import FlowLease, FlowLeaseLost, flow_claim, flow_fence, flow_release
from .models import MAX_ATTEMPTS, FlowState, ForgeFlow
from .testing import TestReport, bundle_test

logger = logging.getLogger(__name__)

WORKER = "worker"


def failure_message(error: str) -> str:
    return (
        f"I could not build a working tool in {MAX_ATTEMPTS} attempts. The last problem was: "
        f"{error[-1500:]}\nWant me to try a different approach (for example a simpler tool, or "
        "other websites or APIs)?"
    )


def _retry_or_fail(flow: ForgeFlow, *, feedback: str, stage: str) -> None:
    """After a failed attempt: regenerate with `feedback`, or fail after the last attempt."""
    previous = flow.state
    if flow.attempt >= MAX_ATTEMPTS:
        flow.fail(error=f"{stage}: {feedback}", message=failure_message(feedback))
        save_and_record(
            flow,
            from_state=previous,
            actor=WORKER,
            reason=f"attempt {flow.attempt}: {stage} failed",
        )
        return
    flow.regenerate(feedback=f"{stage}: {feedback}")
    save_and_record(
        flow,
        from_state=previous,
        actor=WORKER,
        reason=f"attempt {flow.attempt - 1}: {stage} failed; regenerating",
        feedback=feedback[-2000:],
    )


# --- designing -----------------------------------------------------------------------------------


def _design(lease: FlowLease) -> None:
    crash_point("forge_designing")
    with transaction.atomic():
        flow = flow_fence(lease)
        if flow.pending_question:
            return  # waits for the answer
        topic = design.next_topic(
            allowed_domains=flow.allowed_domains, credentials=flow.credentials
        )
        previous = flow.state
        if topic is not None:
            flow.ask(topic=topic, question=design.QUESTIONS[topic])
            save_and_record(flow, from_state=previous, actor=WORKER, reason=f"asked {topic}")
        else:
            flow.design_done()
            save_and_record(flow, from_state=previous, actor=WORKER, reason="requirements complete")


# --- generating ----------------------------------------------------------------------------------


def _generation_request(flow: ForgeFlow) -> generation.GenerationRequest:
    current = version_texts(flow.base_version) if flow.base_version_id else None
    return generation.GenerationRequest(
        request=flow.request,
        requirements=list(flow.requirements or []),
        allowed_domains=list(flow.allowed_domains or []),
        credentials=list(flow.credentials or []),
        skill_name=flow.skill_name,
        current_files=current,
        feedback=flow.feedback,
        previous_files=flow.files or None,
    )


def beyond_request(flow: ForgeFlow, manifest: Any) -> str:
    """What the generated manifest asks for that the requester did not allow ("" if nothing):
    a generated skill never proposes more than its design said."""
    allowed = list(flow.allowed_domains or [])
    extra = [d for d in manifest.allowed_domains if not domain_covered(d, allowed)]
    if extra:
        return (
            f"skill.toml: allowed_domains asks for {', '.join(extra)}, which the requester did "
            f"not allow (allowed: {', '.join(allowed) or 'none'}) [manifest-beyond-request]"
        )
    named = {n.lower() for n in flow.credentials or []}
    unknown = [n for n in manifest.credential_names if n.lower() not in named]
    if unknown:
        return (
            f"skill.toml: [auth] uses {', '.join(unknown)}, which the requester did not name "
            f"(named: {', '.join(flow.credentials or []) or 'none'}) [manifest-beyond-request]"
        )
    return ""


def _generate(lease: FlowLease, client: openai.OpenAI) -> None:
    flow = ForgeFlow.objects.select_related("base_version").get(pk=lease.flow_id)
    request = _generation_request(flow)
    try:
        reply = llm_chat(client=client, messages=generation.messages(request), role=ModelRole.MOTOR)
        files = generation.parse_answer(reply.content or "")
        bundle = bundle_check(files, expected_name=flow.skill_name)
        problem = beyond_request(flow, bundle.manifest)
    except (generation.GenerationMalformed, BundleRefused) as exc:
        files, problem = {}, str(exc)
    crash_point("forge_generating")
    with transaction.atomic():
        flow = flow_fence(lease)
        if problem:
            _retry_or_fail(
                flow, feedback=f"the answer was not usable: {problem}", stage="generation"
            )
            return
        previous = flow.state
        flow.generated(files=files)
        save_and_record(flow, from_state=previous, actor=WORKER, reason=f"attempt {flow.attempt}")


# --- testing -------------------------------------------------------------------------------------


def _test(lease: FlowLease) -> None:
    flow = ForgeFlow.objects.get(pk=lease.flow_id)
    report: TestReport = bundle_test(flow.files)
    crash_point("forge_testing")
    with transaction.atomic():
        flow = flow_fence(lease)
        flow.test_report = report.to_dict()
        if not report.passed:
            _retry_or_fail(flow, feedback=report.output, stage=report.stage)
            return
        after_tests_passed(flow, report=report, actor=WORKER)


# --- acquiring credentials and deploying ---------------------------------------------------------


def credentials_missing(flow: ForgeFlow) -> list[str]:
    """The flow's vault entry names that the agent has not set (names only, never values)."""
    # By name through the app registry: the vault is the cognition app's, above this one.
    credential = apps.get_model("cognition", "Credential")
    names = list(flow.credentials or [])
    if flow.files:
        try:
            names = list(manifest_of(flow.files).credential_names)
        except BundleRefused:
            pass
    present = {
        n.lower()
        for n in credential.objects.filter(agent_id=flow.agent_id).values_list("name", flat=True)
    }
    return [name for name in names if name.lower() not in present]


def _acquire(lease: FlowLease) -> None:
    crash_point("forge_acquiring_credentials")
    with transaction.atomic():
        flow = flow_fence(lease)
        missing = credentials_missing(flow)
        if missing:
            return  # the vault's save wakes it (and the reaper looks now and then)
        previous = flow.state
        flow.deploy()
        save_and_record(flow, from_state=previous, actor=WORKER, reason="every credential is set")


def _deploy(lease: FlowLease) -> None:
    from .interfaces import deploy_version

    flow = ForgeFlow.objects.select_related("skill_version").get(pk=lease.flow_id)
    error = ""
    try:
        deploy_version(flow.skill_version, actor=f"skillforge {flow.id}")
    except Exception as exc:  # any failure to go live fails the flow with its reason
        logger.warning("flow %s: deployment failed: %s", flow.id, exc)
        error = str(exc) or exc.__class__.__name__
    crash_point("forge_deploying")
    with transaction.atomic():
        flow = flow_fence(lease)
        previous = flow.state
        if error:
            flow.fail(
                error=f"deployment: {error}",
                message=f"The tool passed its tests but could not be started: {error}",
            )
            save_and_record(flow, from_state=previous, actor=WORKER, reason="deployment failed")
            return
        tools = [str(t.get("name")) for t in (flow.test_report or {}).get("tools", [])]
        verb = "updated" if flow.base_version_id else "ready"
        flow.complete(
            message=f"✓ {flow.skill_name} {verb}. {len(tools)} tool(s): {', '.join(tools)}"
        )
        save_and_record(flow, from_state=previous, actor=WORKER, reason="deployed")


# --- the slice -----------------------------------------------------------------------------------


def flow_advance(*, flow_id: str, client: openai.OpenAI | None = None) -> str:
    """Do one slice of the flow's current state; returns what happened ("idle" when there was
    nothing to do: a waiting or finished flow, a missing row, a lease held by a live slice)."""
    lease = flow_claim(flow_id)
    if lease is None:
        return "idle"
    try:
        if lease.state == FlowState.DESIGNING:
            _design(lease)
        elif lease.state == FlowState.GENERATING:
            _generate(lease, client or llm_client())
        elif lease.state == FlowState.TESTING:
            _test(lease)
        elif lease.state == FlowState.ACQUIRING_CREDENTIALS:
            _acquire(lease)
        elif lease.state == FlowState.DEPLOYING:
            _deploy(lease)
    except FlowLeaseLost as exc:
        logger.info("%s", exc)
        return "lease_lost"
    except LLMUnavailable as exc:
        # The model could not be reached: the state is unchanged; the reaper tries again.
        logger.warning("flow %s: the LLM is unavailable: %s", flow_id, exc)
        flow_release(lease)
        return "llm_unavailable"
    flow_release(lease)
    return lease.state


def flow_run_until_waiting(
    *, flow_id: str, client: openai.OpenAI | None = None, max_slices: int = 20
) -> ForgeFlow:
    """Advance in this process until the flow waits for someone or finishes (tests, the
    management command and eager setups; workers take one slice per task)."""
    for _ in range(max_slices):
        outcome = flow_advance(flow_id=flow_id, client=client)
        if outcome in ("idle", "llm_unavailable"):
            break
    return ForgeFlow.objects.get(pk=flow_id)


__all__ = ["flow_advance", "flow_run_until_waiting", "credentials_missing", "settings"]
