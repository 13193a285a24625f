"""Seed 000 Scenario 7: the user points at a skill published online. A run fetches it and its
reference file, records where it came from in policy.json, and extraction installs it pending
review with that provenance (and none of the file's permissions); the brain presents the review
naming the source; the user approves."""

from __future__ import annotations

import json

import pytest

from cognition.models import Conversation
from runs.models import MotorRun, RunStatus, Step
from skills.models import Policy, PolicyAuditEvent, PolicyStatus, Skill
from tests.cognition.conftest import World
from tests.e2e.conftest import Stack
from tests.e2e.support import agentmail_skill, brain_calls, last_id, post, shown, wait_handled
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer

pytestmark = [pytest.mark.slow]

SOURCE = "http://skills.sh/agentmail"
FETCHED_AT = "2026-11-25T09:00:00Z"
API_DOCS = "# AgentMail API\n\nPOST /v1/send {to, subject, text} -> {id}\n"


def test_scenario_7_a_skill_fetched_from_a_url_keeps_its_provenance(
    stack: Stack, world: World, session_client
) -> None:
    # given a skill published at skills.sh
    published = agentmail_skill()
    stack.upstream.route("skills.sh", "/agentmail/SKILL.md", Answer(body=published))
    stack.upstream.route("skills.sh", "/agentmail/references/api-docs.md", Answer(body=API_DOCS))
    # a policy.json the run writes: provenance is kept, its permissions are never taken over
    policy_json = json.dumps(
        {
            "provenance": {"source": SOURCE, "fetchedAt": FETCHED_AT},
            "allowedDomains": ["api.agentmail.to"],
            "requiredCredentials": ["AGENTMAIL_API_KEY"],
        }
    )
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    task = (
        f"Fetch the skill from {SOURCE}: download SKILL.md and the files it references, write "
        "them to the workspace root, and record provenance (source URL and fetch time) in "
        "policy.json."
    )
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": task,
                    "tools": ["read", "write", "fetch"],
                    "domains": ["skills.sh"],
                },
            )
        ),
        reply_text("Fetching the AgentMail skill from skills.sh."),
    )
    stack.motor.add(
        reply_tools(tool_call("fetch", {"url": f"{SOURCE}/SKILL.md"})),
        reply_tools(tool_call("fetch", {"url": f"{SOURCE}/references/api-docs.md"})),
        reply_tools(
            tool_call("write", {"path": "SKILL.md", "content": published}),
            tool_call("write", {"path": "references/api-docs.md", "content": API_DOCS}),
            tool_call("write", {"path": "policy.json", "content": policy_json}),
        ),
        reply_text("Fetched agentmail from skills.sh: SKILL.md and references/api-docs.md."),
    )
    presented = (
        "I added AgentMail, fetched from skills.sh. It references api.agentmail.to and the "
        "credential AGENTMAIL_API_KEY; files: SKILL.md, references/api-docs.md. Approve it?"
    )
    stack.smart.add(reply_text(presented))

    # when olivia asks
    added = post(olivia, chat, "Check out https://skills.sh/agentmail — add that skill")
    run_id = added[2]["tool_result"]["result"]["run_id"]
    wait_handled(stack, run_id, "completed")

    # then the run fetched both files from skills.sh only, and extraction installed the skill
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.allowed_domains, run.result["skills"]["created"]) == (
        RunStatus.COMPLETED,
        ["skills.sh"],
        ["agentmail"],
    )
    assert stack.upstream.requests("skills.sh") == [
        "GET /agentmail/SKILL.md",
        "GET /agentmail/references/api-docs.md",
    ]
    assert [
        s.tool for s in Step.objects.filter(attempt__run=run).order_by("iteration", "call_index")
    ] == ["fetch", "fetch", "write", "write", "write"]
    skill = Skill.objects.get(name="agentmail")
    version = skill.current_version
    assert sorted(version.files.values_list("path", flat=True)) == [
        "SKILL.md",
        "references/api-docs.md",
    ]
    assert bytes(version.files.get(path="SKILL.md").data).decode() == published
    assert version.provenance == {"source": SOURCE, "fetched_at": FETCHED_AT}
    assert version.extracted_from["run_id"] == run_id
    # pending review → reviewed on the wake-up; the file's permissions are not granted
    policy = Policy.objects.get(skill=skill, agent=world.alpha)
    assert (policy.status, policy.allowed_domains, policy.required_credentials) == (
        PolicyStatus.REVIEWED,
        [],
        [],
    )
    assert policy.review_facts["provenance"]["source"] == SOURCE
    # the user saw the review card with the source, and the brain's question
    rows = shown(chat, since=added[-1]["id"])
    assert rows == [
        (
            "event",
            "motor_result",
            f"Run {run_id} completed: Fetched agentmail from skills.sh: SKILL.md and "
            "references/api-docs.md.",
        ),
        ("event", "skill_review", "Skill 'agentmail' is reviewed and waits for your approval."),
        ("assistant", "", presented),
    ]
    card = chat.messages.get(event__type="skill_review").event
    assert card["facts"]["provenance"]["source"] == SOURCE
    # and the chat page's review card names the source and offers the approve button
    page = olivia.get(f"/chat/{chat.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'<dd class="provenance">{SOURCE} (fetched {FETCHED_AT})</dd>' in html
    assert "Approve agentmail</button>" in html
    wake_prompt = json.dumps(stack.smart.requests[0]["messages"])
    assert SOURCE in wake_prompt
    assert "You cannot approve on this turn." in stack.smart.requests[0]["messages"][0]["content"]
    assert [c[1:] for c in brain_calls(chat, since=added[-1]["id"])] == [
        ("core_skill", {"action": "review", "name": "agentmail"})
    ]

    # when olivia approves, granting the API's domain
    mark = last_id(chat)
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_skill",
                {
                    "action": "update",
                    "name": "agentmail",
                    "fields": {"domains": ["api.agentmail.to"]},
                },
            ),
            tool_call("core_skill", {"action": "approve", "name": "agentmail"}),
        ),
        reply_text("AgentMail from skills.sh is approved."),
    )
    post(olivia, chat, "Looks fine, approve it for api.agentmail.to")

    # then it is approved, and its history names the run that installed it
    policy.refresh_from_db()
    assert (policy.status, policy.approved_content_hash) == (
        PolicyStatus.APPROVED,
        version.content_hash,
    )
    assert list(
        PolicyAuditEvent.objects.filter(policy=policy)
        .order_by("id")
        .values_list("action", "actor_label")
    ) == [
        ("policy_created", f"run {run_id}"),
        ("reviewed", "agent:alpha"),
        ("policy_updated", "api:olivia"),
        # the approval grants what the content uses beyond her edit (tools, its credential)
        ("policy_updated", "api:olivia"),
        ("approved", "api:olivia"),
    ]
    assert policy.tools and policy.required_credentials == ["AGENTMAIL_API_KEY"]
    assert shown(chat, since=mark)[-1] == ("assistant", "", "AgentMail from skills.sh is approved.")
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
