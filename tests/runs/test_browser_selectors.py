"""The browser's selector cache per skill, in real runs against the test portal: an element the
model named by ref with a target is remembered (role and name) for the skill, a later run of the
skill acts on the target alone (hits counted), and a remembered element missing from the page
twice in a row is dropped — an event in the run's trace — and the model finds it again."""

from __future__ import annotations

import pytest

from runs.browser_models import BrowserSelector
from runs.models import RunEvent, Step
from runs.selectors import run_log
from runs.services import run_start
from skills.models import Skill
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.portal import HOST, serve_portal
from tests.fixtures.upstream import upstream  # noqa: F401 (fixture)
from tests.runs.helpers import drive, new_workspace

pytestmark = [pytest.mark.django_db, pytest.mark.browser, pytest.mark.slow]

PORTAL = f"http://{HOST}"


@pytest.fixture
def portal(upstream, monkeypatch, settings):  # noqa: F811
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", f"{HOST}={upstream.ip}")
    settings.SANDBOX_BACKEND = "bwrap"
    upstream.routes_clear()
    serve_portal(upstream)
    yield upstream
    upstream.routes_clear()


def browse(call_id: str, **arguments: object) -> dict:
    return reply_tools(tool_call("browser", arguments, call_id=call_id))


def _run(agent, skill: Skill | None, scripted_llm, *replies: dict) -> dict[str, dict]:
    run_id = run_start(
        agent_id=agent.pk,
        task="Read the meters",
        tools=["browser"],
        allowed_domains=[HOST],
        workspace=new_workspace(),
        actor="test",
        skill_id=skill.pk if skill else None,
    )["run_id"]
    scripted_llm.add(*replies, reply_text("Done."))
    drive(run_id, scripted_llm.client())
    results = {
        step.tool_call_id: step.result
        for step in Step.objects.filter(attempt__run_id=run_id).exclude(tool_call_id="")
    }
    return {"run_id": run_id, **results}


def test_a_remembered_element_is_used_by_target_alone_and_dropped_after_two_misses(
    agent, scripted_llm, portal
) -> None:
    skill = Skill.objects.create(name="utility-readings")
    # given a first run that names the login button by ref, with a target
    first = _run(
        agent,
        skill,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("user", action="type", ref="e1", text="tenant67", target="user name field"),
    )
    # then the element's role and name are kept for the skill
    assert first["user"]["ok"], first["user"]["output"]
    kept = BrowserSelector.objects.get(skill=skill, target="user name field")
    assert (kept.role, kept.name, kept.hits, kept.misses, kept.misses_in_row) == (
        "textbox",
        "Username",
        0,
        0,
        0,
    )

    # when a second run of the skill names only the target, on the login page
    second = _run(
        agent,
        skill,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("user", action="type", text="tenant67", target="user name field"),
    )
    # then the action was done on the remembered element, a hit
    assert second["user"]["ok"], second["user"]["output"]
    assert second["user"]["output"].startswith("(remembered element for 'user name field': e1)")
    assert "e1 textbox Username = tenant67" in second["user"]["output"]
    kept.refresh_from_db()
    assert (kept.hits, kept.misses, kept.misses_in_row) == (1, 0, 0)

    # when a third run names it on a page where it is not, twice in a row
    third = _run(
        agent,
        skill,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/meters"),
        browse("miss1", action="type", text="x", target="user name field"),
        browse("miss2", action="type", text="x", target="user name field"),
        browse("again", action="type", text="x", target="user name field"),
    )
    # then the first miss keeps it, the second drops it, and the model is told to find it again
    assert third["miss1"]["error_code"] == "not_found"
    assert "is not on this page" in third["miss1"]["output"]
    assert third["miss2"]["error_code"] == "not_found"
    assert "not found twice in a row and is forgotten" in third["miss2"]["output"]
    assert not BrowserSelector.objects.filter(skill=skill).exists()
    assert third["again"]["error_code"] == "not_found"
    assert "no element is remembered for target 'user name field'" in third["again"]["output"]
    # and the drop is an event in the run's trace
    (event,) = RunEvent.objects.filter(
        run_id=third["run_id"], detail__event="browser_selector_invalidated"
    )
    assert event.detail == {
        "event": "browser_selector_invalidated",
        "skill_id": skill.pk,
        "target": "user name field",
        "role": "textbox",
        "name": "Username",
        "hits": 1,
        "misses": 2,
        "reason": "not found 2 times in a row",
    }
    assert event.actor.startswith("worker:") and event.from_status == event.to_status
    assert "browser_selector_invalidated: 'user name field'" in run_log(run_id=third["run_id"])


def test_a_hit_between_misses_starts_the_count_again_and_a_new_ref_replaces_the_element(
    agent, scripted_llm, portal
) -> None:
    skill = Skill.objects.create(name="utility-readings")
    _run(
        agent,
        skill,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("pw", action="type", ref="e2", text="p", target="secret field"),
    )
    runs = _run(
        agent,
        skill,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/meters"),
        browse("miss", action="type", text="x", target="secret field"),
        browse("nav2", action="navigate", url=f"{PORTAL}/login"),
        browse("hit", action="type", text="p", target="secret field"),
        browse("nav3", action="navigate", url=f"{PORTAL}/meters"),
        browse("miss2", action="type", text="x", target="secret field"),
    )
    kept = BrowserSelector.objects.get(skill=skill, target="secret field")
    # a miss, a hit, a miss: never two in a row, so it stays
    assert (runs["miss"]["ok"], runs["hit"]["ok"], runs["miss2"]["ok"]) == (False, True, False)
    assert (kept.role, kept.name, kept.hits, kept.misses, kept.misses_in_row) == (
        "textbox",
        "Password",
        1,
        2,
        1,
    )
    assert not RunEvent.objects.filter(detail__event="browser_selector_invalidated").exists()
    # when the model names another element for the same target, it replaces the kept one
    _run(
        agent,
        skill,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/meters"),
        browse("m0", action="type", ref="e4", text="988", target="secret field"),
    )
    kept.refresh_from_db()
    assert (kept.role, kept.name, kept.hits, kept.misses, kept.misses_in_row) == (
        "textbox",
        "New reading Apt 67 cold water",
        0,
        0,
        0,
    )


def test_a_target_alone_in_a_run_without_a_skill_is_refused_naming_the_rule(
    agent, scripted_llm, portal
) -> None:
    results = _run(
        agent,
        None,
        scripted_llm,
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("user", action="type", text="x", target="user name field"),
        browse("ref", action="type", ref="e1", text="x", target="user name field"),
    )
    assert results["user"]["error_code"] == "invalid_args"
    assert "this run has no skill" in results["user"]["output"]
    # with a ref the target is only a description: the action runs, nothing is remembered
    assert results["ref"]["ok"]
    assert not BrowserSelector.objects.exists()
