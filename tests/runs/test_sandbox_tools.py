"""Granted tools run in a real bwrap sandbox session opened for the run."""

from __future__ import annotations

import pytest

from runs.errors import InvalidRunParams
from runs.models import Attempt, MotorRun, RunStatus, Step
from runs.services import SliceOutcome, run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

pytestmark = pytest.mark.django_db


def test_only_the_granted_tools_schemas_are_offered_and_they_run_in_the_sandbox(
    agent, scripted_llm, tmp_path
):
    # given a run granted the filesystem tools on a workspace
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Write a note",
        tools=["filesystem"],
        workspace=str(workspace),
        actor="test",
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "note.txt", "content": "hello"}, call_id="w")),
        reply_tools(tool_call("read", {"path": "note.txt"}, call_id="r")),
        reply_text("Wrote and read the note."),
    )
    # when the loop runs
    outcomes = drive(run_id, scripted_llm.client())
    # then the model was offered exactly the granted tools plus the host-side ones
    offered = [tool["function"]["name"] for tool in scripted_llm.requests[0]["tools"]]
    assert offered == [
        "read",
        "write",
        "edit",
        "list",
        "glob",
        "grep",
        "ask_user",
        "request_approval",
        "save_credential",
    ]
    assert (
        "Granted tools: read, write, edit, list, glob, grep"
        in (scripted_llm.requests[0]["messages"][0]["content"])
    )
    # and the calls ran in the sandbox against the workspace
    assert outcomes == [SliceOutcome.FINISHED]
    assert (workspace / "note.txt").read_text() == "hello"
    steps = list(Step.objects.filter(attempt__run_id=run_id))
    assert [(s.tool, s.state, s.result["ok"]) for s in steps] == [
        ("write", "done", True),
        ("read", "done", True),
    ]
    read_message = Attempt.objects.get(run_id=run_id).messages[-2]
    assert read_message["tool_call_id"] == "r"
    assert "hello" in read_message["content"]
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_an_unknown_tool_grant_is_refused_naming_it(agent):
    with pytest.raises(InvalidRunParams, match="tools: unknown tool\\(s\\): 'teleport'"):
        run_start(
            workspace=new_workspace(),
            agent_id=agent.pk,
            task="t",
            tools=["read", "teleport"],
            actor="test",
        )
    assert MotorRun.objects.count() == 0


def test_the_model_gets_older_results_compacted_while_the_attempt_keeps_them_in_full(
    agent, scripted_llm, tmp_path
):
    # given five calls that each print 3000 characters
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk, task="Print", tools=["code"], workspace=str(workspace), actor="test"
    )["run_id"]
    scripted_llm.add(
        *(reply_tools(tool_call("code", {"code": f"print('{i}' * 3000)"})) for i in range(5)),
        reply_text("printed"),
    )
    # when the loop runs
    drive(run_id, scripted_llm.client())
    # then the last request carried the two oldest results shortened and the last three in full
    sent = [m["content"] for m in scripted_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [len(content) < 1000 for content in sent] == [True, True, False, False, False]
    assert sent[0].startswith("[compacted tool result")
    stored = [
        m["content"] for m in Attempt.objects.get(run_id=run_id).messages if m["role"] == "tool"
    ]
    assert [content.strip() for content in stored] == [str(i) * 3000 for i in range(5)]


def test_a_review_run_reads_only_and_offers_no_host_side_tools(agent, scripted_llm, tmp_path):
    # given a skill directory and a review run over it
    workspace = tmp_path / "skill"
    workspace.mkdir()
    (workspace / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nbody\n")
    run_id = run_start(
        agent_id=agent.pk, task="Review", workspace=str(workspace), review=True, actor="test"
    )["run_id"]
    scripted_llm.add(
        reply_tools(
            tool_call("read", {"path": "SKILL.md"}), tool_call("ask_user", {"question": "?"})
        ),
        reply_text("Looks fine."),
    )
    # when it runs
    drive(run_id, scripted_llm.client())
    # then it was offered exactly the read-only tools, and ask_user was refused
    offered = [tool["function"]["name"] for tool in scripted_llm.requests[0]["tools"]]
    assert offered == ["read", "list", "glob", "grep"]
    run = MotorRun.objects.get(pk=run_id)
    assert (run.max_iterations, run.max_attempts, run.status) == (10, 1, RunStatus.COMPLETED)
    steps = list(Step.objects.filter(attempt__run_id=run_id).order_by("call_index"))
    assert [(s.tool, s.result["ok"]) for s in steps] == [("read", True), ("ask_user", False)]
    assert steps[1].result["output"] == "ask_user is not available in a review run"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"tools": ["write"]},
            "tools: a review run may use only read, list, glob, grep, not write",
        ),
        ({"allowed_domains": ["example.com"]}, "allowed_domains/credential_names: a review run"),
        ({"credential_names": ["key"]}, "allowed_domains/credential_names: a review run"),
    ],
)
def test_a_review_run_refuses_write_network_and_credentials(agent, params, message):
    with pytest.raises(InvalidRunParams) as excinfo:
        run_start(
            agent_id=agent.pk,
            task="Review",
            review=True,
            actor="test",
            workspace=new_workspace(),
            **params,
        )
    assert str(excinfo.value).startswith(message)
    assert MotorRun.objects.count() == 0
