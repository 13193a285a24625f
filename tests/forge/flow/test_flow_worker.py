"""Flows advanced by a real Celery worker process, the LLM played by the stub server; a worker
SIGKILLed in the middle of a state leaves the flow to the redelivered slice, which finishes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from forge.flow_services import flow_start
from forge.models import FlowEvent, FlowState, ForgeFlow
from tests.fixtures.llm import reply_text
from tests.forge.flow.skillfiles import answer, skill_files
from tests.runs.faults import database_url, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _state(flow_id: str) -> str:
    return ForgeFlow.objects.filter(pk=flow_id).values_list("state", flat=True).get()


@pytest.mark.parametrize(
    ("boundary", "llm_calls"),
    [
        # killed before the designing slice recorded anything: redone, nothing asked twice
        ("forge_designing", 1),
        # killed with the model's answer in hand, before it was recorded: the model is asked again
        ("forge_generating", 2),
        # killed after the sandbox test, before its result was recorded: tested again
        ("forge_testing", 1),
    ],
)
def test_a_worker_killed_in_a_state_leaves_the_flow_to_the_redelivered_slice(
    agent, processes, llm_stub_server, tmp_path: Path, boundary, llm_calls
):
    # given a worker that SIGKILLs itself (once) at `boundary`
    marker = tmp_path / "crashed"
    llm_stub_server.add(*[reply_text(answer(skill_files()))] * 2)
    processes.worker(
        broker=settings.CELERY_BROKER_URL,
        database=database_url(),
        pool="prefork",
        concurrency=1,
        MOTOR_TEST_CRASH_AT=f"{boundary}:{marker}",
    )
    # when a flow starts
    flow = flow_start(
        agent=agent, request="add two numbers", actor="t", allowed_domains=[], credentials=[]
    )
    # then the process died there, and the flow still reached its approval
    try:
        wait_for(lambda: _state(flow.id) == FlowState.AWAITING_APPROVAL, "the approval", 150)
    except AssertionError:
        raise AssertionError(processes.log_text()[-6000:]) from None
    assert marker.exists()
    flow.refresh_from_db()
    assert (flow.attempt, flow.skill_version.number, flow.lease_owner) == (1, 1, "")
    assert len(llm_stub_server.requests) == llm_calls
    # and each state was recorded once: the killed slice wrote nothing
    moves = list(FlowEvent.objects.filter(flow=flow).values_list("from_state", "to_state"))
    assert moves == [
        ("", "designing"),
        ("designing", "generating"),
        ("generating", "testing"),
        ("testing", "awaiting_approval"),
    ]


@pytest.mark.parametrize("boundary", ["forge_acquiring_credentials", "forge_deploying"])
def test_a_worker_killed_after_approval_still_deploys_the_version_once(
    agent, olivia, processes, llm_stub_server, tmp_path: Path, boundary
):
    from cognition.services import credential_set
    from forge.approving import flow_approve
    from forge.models import DeployedServer
    from skills.services import Actor

    # given a credential skill whose credential is already in the vault, and a worker that
    # SIGKILLs itself (once) at `boundary`
    credential_set(agent=agent, name="ADDER_TOKEN", value="t0k-never-shown", actor=olivia)
    files = skill_files(auth={"ADDER_TOKEN": "ADDER_TOKEN"})
    llm_stub_server.add(reply_text(answer(files)))
    marker = tmp_path / "crashed"
    processes.worker(
        broker=settings.CELERY_BROKER_URL,
        database=database_url(),
        pool="prefork",
        concurrency=1,
        MOTOR_TEST_CRASH_AT=f"{boundary}:{marker}",
    )
    flow = flow_start(
        agent=agent, request="add", actor="t", allowed_domains=[], credentials=["ADDER_TOKEN"]
    )
    wait_for(lambda: _state(flow.id) == FlowState.AWAITING_APPROVAL, "the approval", 150)
    # when the owner approves it
    flow_approve(flow_id=flow.id, actor=Actor.from_user(olivia))
    # then the killed slice's work was redone by the redelivered one, and the flow completed
    wait_for(lambda: _state(flow.id) == FlowState.COMPLETE, "completion", 150)
    assert marker.exists()
    assert DeployedServer.objects.filter(version__skill__name="adder").count() == 1
    moves = list(FlowEvent.objects.filter(flow=flow).values_list("from_state", "to_state"))
    assert moves[-3:] == [
        ("awaiting_approval", "acquiring_credentials"),
        ("acquiring_credentials", "deploying"),
        ("deploying", "complete"),
    ]
