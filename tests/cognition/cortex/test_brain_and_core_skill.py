"""The cortex in the built-in brain (plan → confirmation → run; reflex: notification, no
confirmation) and in core.skill (perceive, plan, take_up, retain)."""
# ruff: noqa: F811 - pytest fixtures imported from the brain's conftest are parameters here

from __future__ import annotations

import json

import pytest

from cognition.brain.models import Message, MessageRole
from cognition.brain.services import conversation_post_message
from cognition.cortex import record_acquired
from cognition.models import CortexCandidate
from cognition.principals import Principal
from cognition.tools import core_dispatch
from runs.models import MotorRun
from skills.disabling import RELEASE_REASON, policy_release
from skills.services import Actor
from tests.cognition.brain.conftest import _no_stale_turn_locks, chat, workspaces  # noqa: F401
from tests.fixtures.llm import ScriptedLLM, reply_text, reply_tools, tool_call

from .support import acquired_skill

pytestmark = pytest.mark.django_db

TASK = "Look up the sales report"
ACT = {"mode": "agentic", "task": TASK, "skill": "sales-report"}


@pytest.fixture
def policy(tmp_path, world):
    policy = acquired_skill(tmp_path / "src", agent=world.alpha, approver=world.olivia)
    record_acquired(
        agent=world.alpha, task=TASK, skill_version=policy.skill.current_version, source="local"
    )
    return policy


def _say(world, chat, text: str, *replies) -> list[Message]:
    brain = ScriptedLLM()
    brain.add(*replies)
    return conversation_post_message(
        conversation_id=chat.pk, text=text, actor=world.olivia, client=brain.client()
    )


def test_a_cortex_skill_runs_only_after_the_user_confirmed_its_plan(
    world, chat, policy, workspaces
):
    policy_release(policy=policy, actor=Actor.system("test"))
    # when olivia asks and the brain wants to run the skill at once
    added = _say(
        world,
        chat,
        TASK,
        reply_tools(tool_call("core_act", ACT, call_id="a1")),
        reply_text("Here is the plan. Shall I run it?"),
    )
    # then no run started: the plan was written to the chat and the model told to ask
    assert not MotorRun.objects.exists()
    roles = [(m.role, (m.event or {}).get("type")) for m in added]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("event", "execution_plan"),
        ("tool", None),
        ("assistant", None),
    ]
    plan = added[2].event
    assert plan["steps"] == [
        "Sales report",
        "Read the figures from the shared sheet.",
        "Sum them per region.",
        "Write the report as a table.",
    ]
    assert (plan["severity"], plan["reflex"], plan["confirmation"]) == (
        ["read-only"],
        False,
        "ask_user",
    )
    assert added[3].tool_result["error"]["code"] == "plan_confirmation_required"
    assert added[3].tool_result["error"]["details"]["plan"]["skill"] == "sales-report"
    # when olivia confirms and the brain calls again
    added = _say(
        world,
        chat,
        "Yes, go ahead.",
        reply_tools(tool_call("core_act", ACT, call_id="a2")),
        reply_text("Started."),
    )
    # then the released skill is taken up again and the run starts
    result = added[2].tool_result
    assert result["ok"] is True, result
    run = MotorRun.objects.get()
    assert (run.skill.name, run.task) == ("sales-report", TASK)
    policy.refresh_from_db()
    assert policy.disabled_at is None


def test_the_reflex_path_skips_the_confirmation_but_never_the_notification(
    world, chat, policy, workspaces
):
    CortexCandidate.objects.update(weight=0.96, consecutive_successes=6, successes=6, reflex=True)
    added = _say(
        world,
        chat,
        TASK,
        reply_tools(tool_call("core_act", ACT, call_id="a1")),
        reply_text("Running it."),
    )
    kinds = [(m.role, (m.event or {}).get("type")) for m in added]
    assert kinds == [
        ("user", None),
        ("assistant", None),
        ("event", "cortex_reflex"),
        ("tool", None),
        ("assistant", None),
    ]
    assert added[2].text == (
        "⚡ Reflex: sales-report v1 (100% success). Task: Look up the sales report (read-only). "
        "Running it now; say cancel to abort."
    )
    assert added[3].tool_result["ok"] is True
    assert MotorRun.objects.count() == 1


def test_a_long_term_skill_runs_without_a_plan(world, chat, tmp_path, workspaces):
    acquired_skill(tmp_path / "lt", agent=world.alpha, approver=world.olivia, name="weekly-digest")
    added = _say(
        world,
        chat,
        "Make the digest",
        reply_tools(
            tool_call("core_act", {**ACT, "skill": "weekly-digest", "task": "Make the digest"})
        ),
        reply_text("Started."),
    )
    assert added[2].role == MessageRole.TOOL and added[2].tool_result["ok"] is True


def _core(world, trigger="user_message", principal=None, **arguments):
    if principal is None:
        principal = Principal.for_human(world.olivia)
        arguments = {"agent": "alpha", **arguments}
    return core_dispatch(
        principal=principal, tool_name="core.skill", arguments=arguments, trigger=trigger
    )


def test_core_skill_perceive_and_plan(world, policy):
    seen = _core(world, action="perceive", query="find the sales report of Bob")["result"]
    assert (seen["hit"], seen["region"], seen["reflex"]) == (True, "sales-report", None)
    assert [(c["skill"], c["effective_weight"]) for c in seen["candidates"]] == [
        ("sales-report", 0.5)
    ]
    plan = _core(world, action="plan", name="sales-report", query=TASK)["result"]
    assert (plan["skill"], plan["version"], plan["side_effects"], plan["lessons"]) == (
        "sales-report",
        1,
        [],
        [],
    )
    # bad input: clear errors, nothing changed
    assert _core(world, action="plan", name="sales-report")["error"]["details"]["field"] == "query"
    too_long = _core(world, action="perceive", query="x" * 100_000)["error"]
    assert (too_long["code"], too_long["details"]["rule"]) == (
        "skill_search_query_invalid",
        "query-too-long",
    )
    missing = _core(world, action="plan", name="nope", query=TASK)["error"]
    assert missing["code"] == "skill_not_found"


def test_take_up_and_retain_need_the_users_consent(world, policy):
    policy_release(policy=policy, actor=Actor.system("test"))
    agent_says = _core(
        world,
        trigger="motor_result",
        principal=Principal.for_agent(world.alpha),
        action="take_up",
        name="sales-report",
    )
    assert agent_says["error"]["code"] == "consent_required"
    policy.refresh_from_db()
    assert policy.disabled_reason == RELEASE_REASON
    taken = _core(world, action="take_up", name="sales-report")["result"]
    assert taken == {"skill": "sales-report", "taken_up": True}
    refused = _core(world, action="retain", name="sales-report", keep="yes")["error"]
    assert refused["details"]["field"] == "keep"
    kept = _core(world, action="retain", name="sales-report", keep=True)["result"]
    assert kept == {"skill": "sales-report", "action": "retained"}
    assert not CortexCandidate.objects.exists()
    assert json.dumps(kept)  # JSON-safe


def test_a_failed_run_of_a_cortex_skill_wakes_the_brain_with_its_recovery_rule(world, chat, policy):
    from cognition.brain.services import brain_wake_handle

    from .support import failed_run

    _, signal = failed_run(world.alpha, policy, message="upstream answered 503, try later")
    brain = ScriptedLLM()
    brain.add(reply_text("The service was down; it is retried once by itself."))

    assert brain_wake_handle(signal_id=signal.pk, client=brain.client()) == "handled"

    event = Message.objects.filter(conversation=chat, role=MessageRole.EVENT).latest("id")
    assert event.text.endswith(
        "[skill cortex: api_error of 'sales-report'. The cortex retries the run once by itself "
        "in 3 s; tell the user, do not retry it.]"
    )
    assert event.event["cortex"]["recovery"]["wait_s"] == 3.0
    assert (event.event["cortex"]["retry_in_s"], event.event["cortex"]["retried"]) == (3.0, False)
    assert event.event["cortex"]["weight_after"] == pytest.approx(0.45)
    # the hook delivered afterwards finds the outcome learned: nothing twice
    from cognition.cortex.hook import learn_from_signal

    assert learn_from_signal(signal.pk) is None
    assert CortexCandidate.objects.get().weight == pytest.approx(0.45)


def test_a_proven_skill_wakes_the_brain_with_the_retention_question(world, chat, policy):
    from cognition.brain.services import brain_wake_handle

    from .support import succeeded_run

    CortexCandidate.objects.update(weight=0.85, successes=2)
    _, signal = succeeded_run(world.alpha, policy)
    brain = ScriptedLLM()
    brain.add(reply_text("Done. Keep the skill?"))

    brain_wake_handle(signal_id=signal.pk, client=brain.client())

    event = Message.objects.filter(conversation=chat, role=MessageRole.EVENT).latest("id")
    assert event.event["cortex"]["retention_suggested"] is True
    assert "ask the user whether to keep it as a long-term skill" in event.text
    policy.refresh_from_db()
    assert policy.disabled_at is None  # kept until the user answers


def test_the_brain_sees_what_the_cortex_recognises_in_the_users_message(world, chat, policy):
    brain = ScriptedLLM()
    brain.add(reply_text("I know a skill for that."))
    conversation_post_message(
        conversation_id=chat.pk,
        text="find the sales report",
        actor=world.olivia,
        client=brain.client(),
    )
    system = brain.requests[0]["messages"][0]["content"]
    assert (
        '<skill_cortex region="sales-report">\n'
        '  <candidate skill="sales-report" version="1" effective_weight="0.50" successes="0" '
        'failures="0"/>\n</skill_cortex>'
    ) in system
    # a message the cortex does not recognise adds nothing
    other = ScriptedLLM()
    other.add(reply_text("Hello."))
    conversation_post_message(
        conversation_id=chat.pk, text="hello there", actor=world.olivia, client=other.client()
    )
    assert "<skill_cortex" not in other.requests[0]["messages"][0]["content"]
