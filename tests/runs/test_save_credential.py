"""save_credential: scope rules of seed 001, and the value found nowhere but encrypted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from django.db import connection

from runs.models import MotorRun, Step
from runs.services import run_start
from skills.install import skill_install_bundle
from skills.models import Policy, Skill
from skills.policy_edits import policy_update
from skills.selectors import policy_credential_values
from skills.services import Actor
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace
from tests.runs.test_credentials import _redis_dump
from tests.skills.conftest import make_bundle

pytestmark = pytest.mark.django_db

VALUE = "sk-live-9Qx7Jm2Pz8Rw4Tb6"


def _rows_containing(text: str) -> list[str]:
    """Every table of the database (any column, as text) that holds `text`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        tables = [row[0] for row in cursor.fetchall()]
        found: list[str] = []
        for table in tables:
            cursor.execute(
                f'SELECT count(*) FROM "{table}" AS t WHERE t::text LIKE %s',  # noqa: S608
                [f"%{text}%"],
            )
            if cursor.fetchone()[0]:
                found.append(table)
    return found


def _offered(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def test_a_run_creating_a_skill_saves_a_credential_that_only_the_new_policy_holds_encrypted(
    agent, scripted_llm, tmp_path, caplog
):
    # given a run whose workspace holds a new skill, and a model that got a key from a signup page
    caplog.set_level(logging.DEBUG)
    workspace = tmp_path / "ws"
    (workspace / "skills" / "mailer").mkdir(parents=True)
    (workspace / "skills" / "mailer" / "SKILL.md").write_text(
        "---\nname: mailer\ndescription: Sends mail.\n---\n# Steps\nSend it.\n"
    )
    run_id = run_start(
        agent_id=agent.pk,
        task="Sign up",
        tools=["code", "read"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    program = (
        "import os\nv = os.environ['API_KEY']\nprint(len(v), v)\nopen('key.txt', 'w').write(v)\n"
    )
    scripted_llm.add(
        reply_tools(
            tool_call("save_credential", {"name": "API_KEY", "value": VALUE}, call_id="s"),
            text=f"I got the key {VALUE} from the page.",
        ),
        reply_tools(tool_call("code", {"code": program}, call_id="c")),
        reply_tools(tool_call("read", {"path": "key.txt"}, call_id="r")),
        reply_text("Signed up."),
    )
    # when the run saves the value, uses it, reads it back from a file and finishes
    drive(run_id, scripted_llm.client())
    # then save_credential was offered, and the step holds the placeholder, not the value
    assert "save_credential" in _offered(scripted_llm.requests[0])
    steps = list(Step.objects.filter(attempt__run_id=run_id).order_by("iteration"))
    assert [(s.tool, s.result["ok"]) for s in steps] == [
        ("save_credential", True),
        ("code", True),
        ("read", True),
    ]
    assert steps[0].arguments == {"name": "API_KEY", "value": "<credential:API_KEY>"}
    assert steps[0].reasoning == "I got the key <credential:API_KEY> from the page."
    # and later calls got the value as NAME but every output shows the placeholder
    assert steps[1].result["output"].strip() == f"{len(VALUE)} <credential:API_KEY>"
    assert steps[2].result["output"] == "<credential:API_KEY>"
    assert (workspace / "key.txt").read_text() == VALUE
    # and the extracted skill's policy holds it (encrypted), the run holds it no more
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["skills"]["created"], run.saved_credentials) == (
        "completed",
        ["mailer"],
        "",
    )
    policy = Policy.objects.get(skill__name="mailer", agent=agent)
    assert policy.required_credentials == ["API_KEY"]
    assert policy_credential_values(policy=policy) == {"API_KEY": VALUE}
    # and the raw value is in no table, no LLM request after the call, no log and no Redis key
    assert _rows_containing(VALUE) == []
    assert [VALUE in repr(request) for request in scripted_llm.requests] == [False] * 4
    assert VALUE not in caplog.text
    assert VALUE not in _redis_dump()


def _skill_run(agent, tmp_path: Path, *, required: list[str]) -> tuple[str, Policy]:
    installed = skill_install_bundle(
        bundle=make_bundle("portal"), actor=Actor.system("t"), agent=agent
    )
    policy = policy_update(
        policy=installed.policy, actor=Actor.system("t"), required_credentials=required
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Log in",
        workspace=str(workspace),
        skill_id=installed.version.skill_id,
        skill_version_id=installed.version.pk,
        actor="t",
    )["run_id"]
    return run_id, policy


def test_a_skill_run_saves_a_required_credential_into_its_policy(agent, scripted_llm, tmp_path):
    # given a run of an existing skill that requires PORTAL_TOKEN
    run_id, policy = _skill_run(agent, tmp_path, required=["PORTAL_TOKEN"])
    scripted_llm.add(
        reply_tools(tool_call("save_credential", {"name": "PORTAL_TOKEN", "value": VALUE})),
        reply_text("Saved."),
    )
    # when the model saves it
    drive(run_id, scripted_llm.client())
    # then the skill policy holds the value at once, and only there (encrypted)
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.result["ok"], step.arguments["value"]) == (True, "<credential:PORTAL_TOKEN>")
    assert policy_credential_values(policy=Policy.objects.get(pk=policy.pk)) == {
        "PORTAL_TOKEN": VALUE
    }
    assert _rows_containing(VALUE) == []
    assert Skill.objects.count() == 1


@pytest.mark.parametrize(
    ("required", "reason"),
    [
        ([], "this skill declares no required credentials, so it may not save any"),
        (["OTHER"], "'PORTAL_TOKEN' is not among this skill's required credentials (OTHER)"),
    ],
)
def test_a_skill_run_may_not_save_a_name_outside_its_required_credentials(
    agent, scripted_llm, tmp_path, required, reason
):
    # given a run of a skill whose required credentials do not name PORTAL_TOKEN
    run_id, policy = _skill_run(agent, tmp_path, required=required)
    scripted_llm.add(
        reply_tools(tool_call("save_credential", {"name": "PORTAL_TOKEN", "value": VALUE})),
        reply_text("Could not save."),
    )
    # when the model tries to save it
    drive(run_id, scripted_llm.client())
    # then it is denied with the rule, and the value was kept nowhere
    step = Step.objects.get(attempt__run_id=run_id)
    assert (step.result["ok"], step.result["error_code"], step.result["output"]) == (
        False,
        "denied",
        f"save_credential denied: {reason}",
    )
    assert Policy.objects.get(pk=policy.pk).credential_values == ""
    assert MotorRun.objects.get(pk=run_id).saved_credentials == ""
    assert _rows_containing(VALUE) == []
    assert VALUE not in repr(scripted_llm.requests[1])


def test_review_runs_are_not_offered_save_credential(agent, scripted_llm, tmp_path):
    # given a review run (a run without a workspace no longer exists: run_start refuses it)
    skill_dir = tmp_path / "skill"
    skill_dir.mkdir()
    (skill_dir / "SKILL.md").write_text("---\nname: x\ndescription: y\n---\n")
    review = run_start(
        agent_id=agent.pk, task="Review", workspace=str(skill_dir), review=True, actor="t"
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("save_credential", {"name": "K", "value": VALUE})),
        reply_text("done"),
    )
    # when its model calls it anyway
    drive(review, scripted_llm.client())
    # then it was never offered, the call was denied, and the value was kept nowhere
    assert ["save_credential" in _offered(r) for r in scripted_llm.requests] == [False] * 2
    results = [
        (step.result["ok"], step.result["error_code"])
        for step in Step.objects.filter(attempt__run_id=review)
    ]
    assert results == [(False, "denied")]
    assert _rows_containing(VALUE) == []


def test_save_credential_cannot_be_granted_as_a_tool(agent):
    # when a caller grants the host-side tool explicitly
    from runs.errors import InvalidRunParams

    with pytest.raises(InvalidRunParams, match="save_credential is host-side"):
        run_start(
            workspace=new_workspace(),
            agent_id=agent.pk,
            task="t",
            tools=["save_credential"],
            actor="t",
        )
    # then no run was created
    assert MotorRun.objects.count() == 0
