"""Execution leases and fencing tokens: one writer per run, even when a worker stalls."""

from __future__ import annotations

import threading
from datetime import timedelta

import httpx
import openai
import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs.errors import LeaseLost
from runs.lease import Lease, lease_lock, lease_release
from runs.ledger import ledger_claim
from runs.llm import chat_completion_body
from runs.models import Attempt, MotorRun, RunEvent, RunStatus, Step
from runs.services import SliceOutcome, run_start, run_step
from tests.fixtures.llm import reply_text, tool_call
from tests.runs.helpers import new_workspace, snapshot


def lease_claim(*, run_id: str, owner: str) -> Lease | None:
    """The slice's claim (`ledger_claim`) as a lease; None when it is not `owner`'s turn."""
    claimed = ledger_claim(run_id=run_id, owner=owner, expected_token=None, actor="t")
    return claimed[0] if claimed is not None else None


def _expire(run_id: str) -> None:
    """Simulate a holder that stalled past its lease (GC pause, frozen VM, slow call)."""
    MotorRun.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


@pytest.mark.django_db
def test_claims_bump_the_token_and_a_live_lease_is_not_shared(agent):
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    # when A claims, B cannot claim while A's lease is live
    first = lease_claim(run_id=run_id, owner="A")
    assert first is not None and first.token == 1
    assert lease_claim(run_id=run_id, owner="B") is None
    # and A may claim again (its own lease), which fences its older token
    again = lease_claim(run_id=run_id, owner="A")
    assert again is not None and again.token == 2
    # when A's lease expires, B gets the next token
    _expire(run_id)
    second = lease_claim(run_id=run_id, owner="B")
    assert second is not None and (second.owner, second.token) == ("B", 3)


@pytest.mark.django_db
def test_a_stale_token_cannot_lock_or_release_and_changes_nothing(agent):
    # given A's lease taken over by B after A stalled
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    stale = lease_claim(run_id=run_id, owner="A")
    _expire(run_id)
    fresh = lease_claim(run_id=run_id, owner="B")
    before = snapshot(run_id)
    # when A tries to write, then it is refused and nothing changed
    with pytest.raises(LeaseLost, match=r"fencing token 1 is stale \(current 2\)"):
        with transaction.atomic():
            lease_lock(stale)
    assert lease_release(stale) is False
    assert snapshot(run_id) == before
    # and B's token still works
    with transaction.atomic():
        assert lease_lock(fresh).lease_token == 2
    assert lease_release(fresh) is True


class _GatedLLM:
    """A transport whose first answer waits until the test opens the gate."""

    def __init__(self, body: dict) -> None:
        self.body = body
        self.entered = threading.Event()
        self.gate = threading.Event()

    def client(self) -> openai.OpenAI:
        def handle(request: httpx.Request) -> httpx.Response:
            self.entered.set()
            assert self.gate.wait(timeout=60)
            return httpx.Response(200, json=self.body)

        return openai.OpenAI(
            base_url="http://llm.test/v1",
            api_key="t",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(handle)),
        )


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_on_one_run_leave_exactly_one_writer(agent, scripted_llm):
    # given worker A inside its LLM call, holding the lease
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    slow = _GatedLLM(
        chat_completion_body(
            content="A's plan",
            tool_calls=[tool_call("nope", call_id="call_from_A")],
            model="model-A",
        )
    )
    outcome_a: list[SliceOutcome] = []

    def worker_a() -> None:
        try:
            outcome_a.append(run_step(run_id=run_id, owner="worker-A", client=slow.client()))
        finally:
            connection.close()

    thread = threading.Thread(target=worker_a)
    thread.start()
    assert slow.entered.wait(timeout=60)
    # while A's lease is live, worker B is turned away without calling the LLM
    assert run_step(run_id=run_id, owner="worker-B", client=scripted_llm.client()) is (
        SliceOutcome.LEASE_BUSY
    )
    assert scripted_llm.requests == []
    # when A stalls past its lease, B takes over and finishes the run
    _expire(run_id)
    scripted_llm.add(reply_text("B finished"))
    assert run_step(run_id=run_id, owner="worker-B", client=scripted_llm.client()) is (
        SliceOutcome.FINISHED
    )
    after_b = snapshot(run_id)
    # and A wakes up with its stale token
    slow.gate.set()
    thread.join(timeout=60)
    # then A's write was refused and changed nothing: one writer
    assert outcome_a == [SliceOutcome.LEASE_LOST]
    assert snapshot(run_id) == after_b
    attempt = Attempt.objects.get(run_id=run_id)
    assert [m.get("content") for m in attempt.messages] == ["t", "B finished"]
    assert Step.objects.filter(attempt=attempt).count() == 0
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["summary"]) == (RunStatus.COMPLETED, "B finished")
    assert RunEvent.objects.filter(run_id=run_id, to_status="completed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_cancel_while_running_fences_the_slice_in_progress(agent, test_redis):
    # given a slice inside its LLM call
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="t", actor="t")["run_id"]
    slow = _GatedLLM(chat_completion_body(tool_calls=[tool_call("nope")], model="m"))
    outcome: list[SliceOutcome] = []

    def worker() -> None:
        try:
            outcome.append(run_step(run_id=run_id, owner="worker-A", client=slow.client()))
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    assert slow.entered.wait(timeout=60)
    # when the run is cancelled meanwhile
    from runs.services import run_cancel

    assert run_cancel(run_id=run_id, actor="agent:1")["new_status"] == "cancelled"
    after_cancel = snapshot(run_id)
    slow.gate.set()
    thread.join(timeout=60)
    # then the slice's write is refused: nothing recorded after the cancel, and the agent is free
    assert outcome == [SliceOutcome.LEASE_LOST]
    assert snapshot(run_id) == after_cancel
    assert Step.objects.filter(attempt__run_id=run_id).count() == 0
    assert test_redis.get(f"motor:mutex:agent:{agent.pk}") is None
