"""The conversations REST API: humans and agent tokens, strangers, consent through the poster.

The brain's LLM is the local stub server, reached through LLM_BASE_URL like in production."""

from __future__ import annotations

import pytest

from cognition.models import Agent, Conversation, Message
from skills.imports import skill_import_pasted
from skills.models import Policy, PolicyStatus
from skills.reviewing import policy_review
from skills.services import Actor
from tests.cognition.conftest import World, skill_md, state_snapshot
from tests.fixtures.llm import reply_text, reply_tools, tool_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def brain_llm(llm_stub_server, settings):
    settings.LLM_BASE_URL = llm_stub_server.base_url
    settings.LLM_API_KEY = "stub"
    return llm_stub_server


def _reviewed_mailer(world: World) -> Policy:
    policy = skill_import_pasted(
        text=skill_md("mailer"), actor=Actor.system("t"), agent=world.alpha
    ).policy
    return policy_review(policy=policy, actor=Actor.system("t"))


def test_a_human_starts_a_conversation_talks_and_reads_it_back(
    world: World, session_client, brain_llm
) -> None:
    client = session_client(world.olivia)
    created = client.post("/api/v1/conversations/", {"agent": "alpha"}, format="json")
    assert created.status_code == 201, created.json()
    conversation = created.json()
    assert (conversation["agent"], conversation["user"], conversation["status"]) == (
        "alpha",
        "olivia",
        "idle",
    )
    brain_llm.add(reply_text("Hello Olivia."))
    posted = client.post(
        f"/api/v1/conversations/{conversation['id']}/messages/", {"text": "Hi"}, format="json"
    )
    assert posted.status_code == 201, posted.json()
    assert [(m["role"], m["text"], m["author"]) for m in posted.json()["messages"]] == [
        ("user", "Hi", "olivia"),
        ("assistant", "Hello Olivia.", None),
    ]
    listed = client.get(f"/api/v1/conversations/{conversation['id']}/messages/").json()
    assert [m["text"] for m in listed["results"]] == ["Hi", "Hello Olivia."]
    mine = client.get("/api/v1/conversations/").json()["results"]
    assert [(c["id"], c["title"]) for c in mine] == [(conversation["id"], "Hi")]


def test_strangers_see_nothing_and_store_nothing(
    world: World, session_client, as_agent, brain_llm
) -> None:
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    url = f"/api/v1/conversations/{chat.pk}/messages/"
    for client in (session_client(world.bob), as_agent(world.bravo_token)):
        assert client.get(f"/api/v1/conversations/{chat.pk}/").status_code == 404
        response = client.post(url, {"text": "hi"}, format="json")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "conversation_not_found"
        assert client.get("/api/v1/conversations/").json()["results"] == []
    # bob cannot open a conversation with olivia's agent either
    refused = session_client(world.bob).post(
        "/api/v1/conversations/", {"agent": "alpha"}, format="json"
    )
    assert refused.status_code == 404
    assert Conversation.objects.count() == 1
    assert Message.objects.count() == 0
    assert brain_llm.requests == []


def test_an_empty_message_is_a_400_naming_the_field(world: World, session_client, brain_llm):
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    response = session_client(world.olivia).post(
        f"/api/v1/conversations/{chat.pk}/messages/", {"text": ""}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"]["fields"] == {
        "text": ["This field may not be blank."]
    }
    assert Message.objects.count() == 0


def test_an_agent_token_relaying_approval_is_refused_unless_trusted(
    world: World, as_agent, brain_llm
) -> None:
    # given a reviewed skill and alpha's own conversation
    _reviewed_mailer(world)
    client = as_agent(world.alpha_token)
    chat = client.post("/api/v1/conversations/", {}, format="json").json()
    url = f"/api/v1/conversations/{chat['id']}/messages/"
    approve = tool_call("core_skill", {"action": "approve", "name": "mailer"})
    brain_llm.add(reply_tools(approve), reply_text("I may not."))
    before = state_snapshot()
    # when the agent posts the user's "approve" and the brain tries
    posted = client.post(url, {"text": "approve mailer"}, format="json").json()["messages"]
    # then the gate refused (alpha is not trusted to relay consent) and nothing changed
    assert posted[2]["tool_result"]["error"]["code"] == "consent_required"
    assert state_snapshot() == before
    # once the owner trusts alpha for relayed consent, the same message approves
    Agent.objects.filter(pk=world.alpha.pk).update(trusted_for_relayed_consent=True)
    brain_llm.add(reply_tools(approve), reply_text("Approved."))
    posted = client.post(url, {"text": "approve mailer"}, format="json").json()["messages"]
    assert posted[2]["tool_result"]["ok"] is True
    policy = Policy.objects.get(agent=world.alpha, skill__name="mailer")
    assert (policy.status, policy.approved_by) == (PolicyStatus.APPROVED, world.olivia)


def test_a_personal_token_is_the_human_principal(world: World, personal_client, brain_llm):
    _reviewed_mailer(world)
    client = personal_client(world.olivia)
    chat = client.post("/api/v1/conversations/", {"agent": str(world.alpha.pk)}, format="json")
    brain_llm.add(
        reply_tools(tool_call("core_skill", {"action": "approve", "name": "mailer"})),
        reply_text("Approved."),
    )
    posted = client.post(
        f"/api/v1/conversations/{chat.json()['id']}/messages/",
        {"text": "yes, approve it"},
        format="json",
    )
    assert posted.json()["messages"][2]["tool_result"]["ok"] is True
    assert Policy.objects.get(skill__name="mailer").status == PolicyStatus.APPROVED
