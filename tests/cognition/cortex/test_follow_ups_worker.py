"""The cortex's follow-ups carried out by real Celery worker processes (the LLM played by the
local stub server): the api_error retry — once, after the wait, written in the run's trace —
against a real failing upstream, and the release after a use when the worker is SIGKILLed
between the learning's commit and the release."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cognition.cortex import record_acquired
from cognition.cortex.follow_ups import follow_ups_sweep
from cognition.cortex.hook import learn_from_signal, outcome_facts, outcome_key
from cognition.models import CortexFollowUp, CortexOutcome
from cognition.tasks import cortex_follow_ups_sweep_task
from runs.models import Attempt, MotorRun, RunEvent, RunStatus, Signal
from runs.services import run_start
from skills.disabling import RELEASE_REASON
from skills.models import Policy, PolicyAuditEvent
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer
from tests.runs.helpers import new_workspace
from tests.skills.admin_support import APPROVER_PERMS, make_agent, make_user

from .support import acquired_skill
from .workers import WAIT_S, start_worker_fixture  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

HOST = "api.allowed.test"
FETCH = {"url": f"http://{HOST}/rate", "method": "GET"}
#: a fetch answered 503 is repeated once at once by the runtime (runs.failures), and three
#: failed calls in a row fail the attempt: one failed attempt is six requests
REQUESTS_PER_FAILED_ATTEMPT = 6


@pytest.fixture
def rate_upstream(upstream, monkeypatch):
    """The test upstream as api.allowed.test for the sandbox's egress (the worker inherits it)."""
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", f"{HOST}={upstream.ip}")
    upstream.routes_clear()
    yield upstream
    upstream.routes_clear()


@pytest.fixture
def agent():
    return make_agent("scout", owner=make_user("olivia", perms=APPROVER_PERMS))


def _acquired(tmp_path: Path, agent, *, tools: list[str]) -> Policy:
    olivia = agent.owner
    policy = acquired_skill(tmp_path / "src", agent=agent, approver=olivia, tools=tools)
    record_acquired(
        agent=agent,
        task="Look up the sales report",
        skill_version=policy.skill.current_version,
        source="local",
    )
    return policy


def _start(agent, policy: Policy, *, tools: list[str], domains: list[str]) -> str:
    return run_start(
        agent_id=agent.pk,
        task="Look up the sales report",
        actor="test",
        tools=tools,
        allowed_domains=domains,
        workspace=new_workspace(),
        skill_id=policy.skill_id,
        skill_version_id=policy.skill.current_version_id,
    )["run_id"]


def wait_for(predicate: Callable[[], object], what: str, tmp_path: Path, timeout_s=150.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    logs = "".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("worker*.log")))
    raise AssertionError(f"timed out waiting for {what}\n{logs[-6000:]}")


def _outcomes(run_id: str) -> list[tuple[bool, str]]:
    return list(
        CortexOutcome.objects.filter(run_id=run_id)
        .order_by("id")
        .values_list("success", "failure_class")
    )


def _follow_ups(run_id: str) -> list[tuple[str, str, bool]]:
    return [
        (f.action, f.result, f.done_at is not None)
        for f in CortexFollowUp.objects.filter(run_id=run_id).order_by("id")
    ]


def _releases(policy: Policy) -> int:
    return PolicyAuditEvent.objects.filter(policy=policy, reason=RELEASE_REASON).count()


def _attempts(run_id: str) -> list[tuple[int, str]]:
    return list(
        Attempt.objects.filter(run_id=run_id).order_by("index").values_list("index", "status")
    )


def test_an_api_error_is_retried_once_after_the_wait_and_the_retry_succeeds(
    agent, tmp_path, llm_stub_server, rate_upstream, start_worker
):
    # given a skill of the cortex whose upstream fails for the whole first attempt, then answers
    policy = _acquired(tmp_path, agent, tools=["fetch"])
    busy = [Answer(status=503, body="busy, try later\n")] * REQUESTS_PER_FAILED_ATTEMPT
    rate_upstream.route(HOST, "/rate", *busy, Answer(body="1.08\n"))
    llm_stub_server.add(
        *(reply_tools(tool_call("fetch", FETCH, call_id=f"a{i}")) for i in range(3)),
        reply_tools(tool_call("fetch", FETCH, call_id="b0")),
        reply_text("The rate is 1.08."),
    )
    start_worker()
    # when its run fails with the upstream's 503s
    run_id = _start(agent, policy, tools=["fetch"], domains=[HOST])
    wait_for(
        lambda: _follow_ups(run_id) == [("retry", "retried", True), ("release", "released", True)],
        "the retry's success and the release",
        tmp_path,
    )

    # then the cortex retried it once by itself, and the retry succeeded
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index) == (RunStatus.COMPLETED, 1)
    assert _attempts(run_id) == [(0, "failed"), (1, "completed")]
    assert rate_upstream.requests(HOST) == ["GET /rate"] * (REQUESTS_PER_FAILED_ATTEMPT + 1)
    assert _outcomes(run_id) == [(False, "api_error"), (True, "")]
    # and the run's trace says who retried, why, and that it waited first
    events = list(RunEvent.objects.filter(run_id=run_id).order_by("id"))
    failed = next(e for e in events if e.to_status == RunStatus.FAILED)
    retried = [e for e in events if e.from_status == RunStatus.FAILED]
    assert len(retried) == 1
    first_signal = Signal.objects.filter(run_id=run_id, payload__status="failed").get()
    assert (retried[0].actor, retried[0].to_status, retried[0].detail) == (
        "skill cortex",
        RunStatus.RUNNING,
        {
            "cortex_retry": {
                "failure_class": "api_error",
                "waited_s": WAIT_S,
                "outcome": outcome_key(first_signal.pk),
            },
            "attempt": 1,
        },
    )
    assert (retried[0].created_at - failed.created_at).total_seconds() >= WAIT_S
    assert (
        Attempt.objects.get(run_id=run_id, index=1)
        .recovery_context["guidance"]
        .startswith("The previous attempt failed with an api_error")
    )
    # and the release after the successful use happened once
    assert _releases(policy) == 1


def test_a_second_api_error_is_not_retried_again_and_is_reported_with_its_class(
    agent, tmp_path, llm_stub_server, rate_upstream, start_worker
):
    # given an upstream that keeps failing
    policy = _acquired(tmp_path, agent, tools=["fetch"])
    rate_upstream.route(HOST, "/rate", Answer(status=503, body="busy, try later\n"))
    llm_stub_server.add(
        *(reply_tools(tool_call("fetch", FETCH, call_id=f"a{i}")) for i in range(6)),
        reply_text("never asked: no third attempt"),
    )
    start_worker()
    # when its run fails, is retried, and fails again
    run_id = _start(agent, policy, tools=["fetch"], domains=[HOST])
    wait_for(lambda: len(_outcomes(run_id)) == 2, "both failures learned", tmp_path)
    time.sleep(WAIT_S * 2)  # time enough for a second retry, which must not come

    # then there was one retry, no third attempt though the run allows three
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.current_attempt_index, run.max_attempts) == (RunStatus.FAILED, 1, 3)
    assert _attempts(run_id) == [(0, "failed"), (1, "failed")]
    assert rate_upstream.requests(HOST) == ["GET /rate"] * (2 * REQUESTS_PER_FAILED_ATTEMPT)
    assert _outcomes(run_id) == [(False, "api_error"), (False, "api_error")]
    assert _follow_ups(run_id) == [("retry", "retried", True)]
    assert RunEvent.objects.filter(run_id=run_id, actor="skill cortex").count() == 1
    # and the second failure is reported with its class, saying the retry was used up
    second = Signal.objects.filter(run_id=run_id, payload__status="failed").order_by("seq").last()
    facts = outcome_facts(second.pk)
    assert facts is not None
    assert (facts["failure_class"], facts["retry_in_s"], facts["retried"]) == (
        "api_error",
        None,
        True,
    )
    # the skill is kept for the user's decision (api_error does not release)
    policy.refresh_from_db()
    assert policy.disabled_at is None


def test_a_worker_killed_between_learning_and_release_releases_exactly_once(
    agent, tmp_path, llm_stub_server, start_worker
):
    # given a worker that dies right after the learning of a run's end commits
    policy = _acquired(tmp_path, agent, tools=["read"])
    llm_stub_server.add(reply_text("Here is the report."))
    marker = tmp_path / "crashed"
    worker = start_worker(MOTOR_TEST_CRASH_AT=f"cortex_after_learning:{marker}")
    # when a run of the cortex's skill succeeds
    run_id = _start(agent, policy, tools=["read"], domains=[])
    wait_for(lambda: marker.exists() and _outcomes(run_id), "the crash after learning", tmp_path)

    # then the learning is committed, the release is not done but recorded as owed
    time.sleep(1.0)
    assert _outcomes(run_id) == [(True, "")]
    assert _follow_ups(run_id) == [("release", "", False)]
    policy.refresh_from_db()
    assert policy.disabled_at is None
    assert worker.poll() is None  # the pool replaced its killed child
    # when the periodic sweep runs (on the worker)
    cortex_follow_ups_sweep_task.delay()
    wait_for(lambda: _follow_ups(run_id) == [("release", "released", True)], "the sweep", tmp_path)

    # then the skill is released, once
    policy.refresh_from_db()
    assert policy.disabled_reason == RELEASE_REASON
    assert _releases(policy) == 1
    # and the redelivered signal and another sweep change nothing
    signal_id = Signal.objects.filter(run_id=run_id, payload__status="completed").get().pk
    assert learn_from_signal(signal_id) is None
    assert follow_ups_sweep() == {}
    assert _releases(policy) == 1
    assert CortexFollowUp.objects.get(run_id=run_id).tries == 1
