"""A flow from its start through designing and generation, in this process (no sandbox yet)."""

from __future__ import annotations

import pytest

from forge.bundles import bundle_import
from forge.errors import FlowAlreadyRunning, FlowInvalid, FlowNotFound, FlowWrongState
from forge.flow_services import flow_respond, flow_start
from forge.models import FlowEvent, FlowState, ForgeFlow
from skills.services import Actor
from tests.fixtures.llm import reply_text
from tests.forge.flow.skillfiles import answer, fetch_skill, skill_files

pytestmark = pytest.mark.django_db


def _events(flow: ForgeFlow) -> list[tuple[str, str, str]]:
    return [
        (e.from_state, e.to_state, e.reason)
        for e in FlowEvent.objects.filter(flow=flow).order_by("id")
    ]


def test_designing_asks_for_the_domains_then_the_credentials_then_generates(
    agent, drive, scripted_llm
):
    # given a flow started without domains or credentials
    flow = flow_start(agent=agent, request="check if my servers are up", actor="user:olivia")
    # when a worker advances it, it asks which hosts the tool may reach
    flow = drive(flow)
    assert (flow.state, flow.pending_topic) == (FlowState.DESIGNING, "domains")
    assert flow.message.startswith("Which web addresses should the tool be able to reach?")
    # and after the answer, which credentials
    flow_respond(flow_id=flow.id, answer="status.myapp.io and api.myapp.io", actor="user:olivia")
    flow = drive(flow)
    assert (flow.pending_topic, flow.allowed_domains) == (
        "credentials",
        ["status.myapp.io", "api.myapp.io"],
    )
    # and after that the requirements are complete: one LLM call generates the files
    scripted_llm.add(reply_text(answer(fetch_skill(domain="status.myapp.io"))))
    flow_respond(flow_id=flow.id, answer="none", actor="user:olivia")
    flow = ForgeFlow.objects.get(pk=flow.id)
    assert (flow.credentials, flow.pending_question) == ([], "")
    from forge.steps import flow_advance

    assert flow_advance(flow_id=flow.id, client=scripted_llm.client()) == "designing"
    assert flow_advance(flow_id=flow.id, client=scripted_llm.client()) == "generating"
    flow = ForgeFlow.objects.get(pk=flow.id)
    assert (flow.state, flow.attempt) == (FlowState.TESTING, 1)
    assert flow.files["skill.toml"].startswith('name = "uptime-checker"')
    # and the request carried the answers, the model never saw anything else of them
    prompt = scripted_llm.requests[0]["messages"][1]["content"]
    assert "ALLOWED DOMAINS: status.myapp.io, api.myapp.io" in prompt
    assert "CREDENTIALS: none" in prompt
    # and every move is audited
    assert _events(flow) == [
        ("", "designing", "create: check if my servers are up"),
        ("designing", "designing", "asked domains"),
        ("designing", "designing", "answered domains"),
        ("designing", "designing", "asked credentials"),
        ("designing", "designing", "answered credentials"),
        ("designing", "generating", "requirements complete"),
        ("generating", "testing", "attempt 1"),
    ]


def test_an_unreadable_answer_keeps_the_question_and_changes_nothing(agent, drive):
    flow = drive(flow_start(agent=agent, request="uptime", actor="user:olivia"))
    before = FlowEvent.objects.count()
    with pytest.raises(FlowInvalid) as caught:
        flow_respond(flow_id=flow.id, answer="the usual ones", actor="user:olivia")
    assert caught.value.details == {"field": "answer", "rule": "domains_answer"}
    flow.refresh_from_db()
    assert (flow.pending_topic, flow.allowed_domains, FlowEvent.objects.count()) == (
        "domains",
        None,
        before,
    )


def test_an_answer_to_a_flow_that_asks_nothing_is_refused(agent):
    flow = flow_start(
        agent=agent, request="add numbers", actor="t", allowed_domains=[], credentials=[]
    )
    with pytest.raises(FlowWrongState, match="asks nothing"):
        flow_respond(flow_id=flow.id, answer="yes", actor="t")


def test_a_generation_answer_without_the_blocks_is_a_failed_attempt_fed_back(
    agent, drive, scripted_llm
):
    # given a flow whose requirements are known, and a model that answers in prose
    flow = flow_start(
        agent=agent, request="add numbers", actor="t", allowed_domains=[], credentials=[]
    )
    scripted_llm.add(reply_text("Sure! I would write a function that adds two numbers."))
    scripted_llm.add(reply_text("Still no code."))
    scripted_llm.add(reply_text("```python\nprint('not a file block')\n```"))
    # when the flow runs out of attempts
    flow = drive(flow)
    # then each answer was a failed attempt whose reason reached the next prompt
    assert len(scripted_llm.requests) == 3
    second_prompt = scripted_llm.requests[1]["messages"][1]["content"]
    assert (
        "THE PREVIOUS ATTEMPT FAILED:\ngeneration: the answer was not usable: the answer has no"
        in (second_prompt)
    )
    # and the flow failed gracefully, offering another approach
    assert (flow.state, flow.attempt) == (FlowState.FAILED, 3)
    assert flow.error.startswith("generation: the answer was not usable: the answer has no fenced")
    assert "Want me to try a different approach" in flow.message
    assert flow.files == {} and flow.skill_version is None


def test_a_manifest_asking_for_more_domains_than_allowed_is_regenerated(agent, drive, scripted_llm):
    # given a flow allowed status.myapp.io only, and a first answer that asks for another host
    flow = flow_start(
        agent=agent,
        request="uptime",
        actor="t",
        allowed_domains=["status.myapp.io"],
        credentials=[],
    )
    scripted_llm.add(reply_text(answer(fetch_skill(domain="evil.example.net"))))
    scripted_llm.add(reply_text(answer(fetch_skill(domain="status.myapp.io"))))
    # when it runs, the first attempt is refused with the rule, the second goes to testing
    flow_id = flow.id
    from forge.steps import flow_advance

    while ForgeFlow.objects.get(pk=flow_id).state != FlowState.TESTING:
        assert flow_advance(flow_id=flow_id, client=scripted_llm.client()) != "idle"
    flow = ForgeFlow.objects.get(pk=flow_id)
    assert flow.attempt == 2
    assert "evil.example.net, which the requester did not allow" in flow.feedback
    assert "[manifest-beyond-request]" in flow.feedback


@pytest.mark.parametrize(
    ("kwargs", "field", "rule"),
    [
        ({"request": ""}, "request", "required"),
        ({"request": "x" * 4001}, "request", "max_length"),
        ({"request": "a", "allowed_domains": ["https://x.io/"]}, "allowed_domains", "format"),
        ({"request": "a", "allowed_domains": "x.io"}, "allowed_domains", "list"),
        ({"request": "a", "credentials": ["sk-live 123"]}, "credentials", "format"),
        ({"request": "a", "mode": "destroy"}, "mode", "enum"),
        ({"request": "a", "skill_name": "Adder!"}, "skill", "format"),
    ],
)
def test_a_bad_start_is_refused_with_the_field_and_rule_and_creates_nothing(
    agent, kwargs, field, rule
):
    with pytest.raises(FlowInvalid) as caught:
        flow_start(agent=agent, actor="t", **kwargs)
    assert (caught.value.details["field"], caught.value.details["rule"]) == (field, rule)
    assert ForgeFlow.objects.count() == 0 and FlowEvent.objects.count() == 0


def test_an_edit_of_a_skill_whose_flow_is_running_is_refused(agent):
    # given an installed MCP skill and an edit of it that has not finished
    bundle_import(files=skill_files("adder"), agent=agent, actor=Actor.system("test"))
    first = flow_start(
        agent=agent, request="also subtract", actor="t", mode="edit", skill_name="adder"
    )
    assert (first.skill_name, first.allowed_domains, first.credentials) == ("adder", [], [])
    # when a second edit of the same skill starts
    with pytest.raises(FlowAlreadyRunning) as caught:
        flow_start(
            agent=agent, request="fix the timeout", actor="t", mode="edit", skill_name="adder"
        )
    # then it is refused naming the running flow, and nothing was created
    assert caught.value.http_status == 409
    assert caught.value.details == {
        "skill": "adder",
        "flow_id": first.id,
        "rule": "one_flow_per_skill",
    }
    assert list(ForgeFlow.objects.values_list("id", flat=True)) == [first.id]


def test_an_edit_of_an_unknown_skill_is_not_found(agent):
    with pytest.raises(FlowNotFound):
        flow_start(agent=agent, request="fix it", actor="t", mode="edit", skill_name="nothing")
    assert ForgeFlow.objects.count() == 0
