"""A tool kind is one executor and one manifest, registered through the pipeline's public
registry: runs may be granted it, the model is offered its schema, and its calls take every
stage of the call pipeline (decide, intent, execute, record, after) with nothing added to the
loop. Real database and loop; only the LLM is scripted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from runs.errors import InvalidRunParams
from runs.models import ApprovalRequest, MotorRun, RunStatus, Step, StepState
from runs.pipeline import (
    CallContext,
    Executor,
    ToolManifest,
    tool_kind_register,
    tool_kind_unregister,
)
from runs.services import run_approve, run_start
from runs.tools import envelope
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db

ECHO = ToolManifest(
    name="echo",
    description="Repeat a text.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    idempotent=True,
)


class Echo(Executor):
    """Answers with the text it was given; remembers each call and whether its intent was
    already written when it ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], bool]] = []

    def execute(self, call: CallContext) -> dict[str, Any]:
        intent_written = Step.objects.filter(
            pk=call.step.pk, state=StepState.INTENT, tool=call.name
        ).exists()
        self.calls.append((call.name, dict(call.arguments), intent_written))
        return envelope(ok=True, output=f"echo: {call.arguments.get('text')}")


@pytest.fixture
def echo() -> Iterator[Echo]:
    executor = Echo()
    tool_kind_register(ECHO, executor)
    yield executor
    tool_kind_unregister(ECHO.name)


@pytest.fixture
def send() -> Iterator[Echo]:
    """A tool kind whose calls could do harm twice (not idempotent)."""
    executor = Echo()
    tool_kind_register(
        ToolManifest(name="send", description="Send a text.", idempotent=False), executor
    )
    yield executor
    tool_kind_unregister("send")


def test_a_registered_tool_kind_is_granted_offered_run_and_recorded(agent, scripted_llm, echo):
    # given a run granted the registered tool, and a model that calls it once, then answers
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Echo hi", tools=["echo"], actor="t"
    )["run_id"]
    call = tool_call("echo", {"text": "hi"})
    scripted_llm.add(reply_tools(call), reply_text("done"))
    # when the loop runs
    drive(run_id, scripted_llm.client())
    # then the model was offered the manifest's schema next to the host-side tools
    first, second = scripted_llm.requests
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "echo",
        "ask_user",
        "request_approval",
        "save_credential",
    ]
    assert first["tools"][0] == ECHO.schema()
    # and the executor ran the call once, after its intent was written
    assert echo.calls == [("echo", {"text": "hi"}, True)]
    # and its result was recorded and fed back to the model as that call's answer
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.tool, step.state, step.arguments) == ("echo", StepState.DONE, {"text": "hi"})
    assert (step.result["ok"], step.result["output"]) == (True, "echo: hi")
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "echo: hi",
    }
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.tools, run.result["summary"]) == (RunStatus.COMPLETED, ["echo"], "done")


def test_a_run_granted_only_a_registered_tool_kind_opens_no_sandbox(agent, scripted_llm, echo):
    # given a run granted only the registered tool (no sandbox tool), which calls it once
    cold_starts = (
        REGISTRY.get_sample_value("motor_sandbox_session_starts_total", {"kind": "cold"}) or 0.0
    )
    run_id = run_start(
        workspace=new_workspace(), agent_id=agent.pk, task="Echo hi", tools=["echo"], actor="t"
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("echo", {"text": "hi"})), reply_text("done"))
    # when it runs to its end
    drive(run_id, scripted_llm.client())
    # then its call ran and no sandbox session was opened for it, ahead or otherwise
    assert echo.calls == [("echo", {"text": "hi"}, True)]
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    assert (
        REGISTRY.get_sample_value("motor_sandbox_session_starts_total", {"kind": "cold"}) or 0.0
    ) == cold_starts


def test_a_registered_tool_kind_not_granted_to_the_run_is_refused_and_never_runs(
    agent, scripted_llm, echo
):
    # given a run granted nothing, whose model calls the registered tool anyway
    run_id = run_start(workspace=new_workspace(), agent_id=agent.pk, task="Echo hi", actor="t")[
        "run_id"
    ]
    scripted_llm.add(reply_tools(tool_call("echo", {"text": "hi"})), reply_text("done"))
    # when the loop runs
    drive(run_id, scripted_llm.client())
    # then the grant rule refused the call: the executor never ran, the model was told why
    assert echo.calls == []
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.result["ok"], step.result["error_code"]) == (False, "denied")
    assert step.result["output"] == "tool 'echo' is not granted to this run (granted: none)"
    assert "echo" not in [tool["function"]["name"] for tool in scripted_llm.requests[0]["tools"]]


def test_the_approval_rule_applies_to_a_registered_tool_kind_that_is_not_idempotent(
    agent, scripted_llm, send
):
    # given a run that requires approvals, granted a tool kind whose calls could do harm twice
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=agent.pk,
        task="Send hi",
        tools=["send"],
        approval_required=True,
        actor="t",
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("send", {"text": "hi"})), reply_text("sent"))
    # when the loop runs, the call waits for the owner and runs only once approved
    client = scripted_llm.client()
    drive(run_id, client)
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_APPROVAL
    assert send.calls == []
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert approval.action == {"tool": "send", "arguments": {"text": "hi"}}
    run_approve(run_id=run_id, approval_id=approval.pk, actor="owner")
    drive(run_id, client)
    # then it ran exactly once, after the approval
    assert send.calls == [("send", {"text": "hi"}, True)]
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_a_tool_kind_cannot_take_the_name_of_a_known_tool():
    # given the names of a sandbox tool, an alias and a host-side tool
    for name in ("bash", "filesystem", "ask_user"):
        # when a tool kind is registered under it, then it is refused
        with pytest.raises(ValueError, match="already known"):
            tool_kind_register(ToolManifest(name=name, description="x"), Echo())
    # and a run may still not be granted a name nobody registered
    with pytest.raises(InvalidRunParams, match="unknown tool"):
        run_start(workspace=new_workspace(), agent_id=1, task="t", tools=["echo"], actor="t")
