"""/api/v1/skills: list, import, detail, review, approve, reject, update, delete — for an agent
token, a human (session and personal token), and a second agent that must see nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from cognition.models import Agent
from skills.models import Policy, PolicyAuditEvent, Skill
from skills.policy_edits import policy_create
from skills.services import Actor

from .conftest import SECRET, World, bearer, raw_policy_credential_column, skill_md, state_snapshot

pytestmark = pytest.mark.django_db

SKILLS = "/api/v1/skills/"
USER_MESSAGE = {"HTTP_X_MOTOR_TRIGGER": "user_message"}


def url(name: str, action: str = "") -> str:
    return f"{SKILLS}{name}/" + (f"{action}/" if action else "")


def imported(client: APIClient, name: str = "mailer", query: str = "") -> dict:
    response = client.post(SKILLS + query, {"skill_md": skill_md(name)}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def trust(agent: Agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(trusted_for_relayed_consent=True)


def test_an_agent_imports_a_pasted_skill_md_as_pending_review(world: World) -> None:
    # when alpha imports a SKILL.md
    body = imported(bearer(world.alpha_token))

    # then it lands pending_review with no domains (seed 000 domain separation)
    assert body["skill"] == "mailer"
    assert body["agent"] == "alpha"
    assert body["status"] == "pending_review"
    assert body["allowed_domains"] == []
    assert body["description"] == "Talks to the example API."
    assert body["content_hash"].startswith("sha256:")
    assert Policy.objects.get(agent=world.alpha, skill__name="mailer").status == "pending_review"


def test_an_invalid_skill_md_is_a_400_naming_the_rule_and_nothing_is_stored(world: World) -> None:
    before = state_snapshot()
    response = bearer(world.alpha_token).post(
        SKILLS, {"skill_md": "---\nname: Bad Name\n---\nbody"}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "skill_invalid"
    assert error["details"]["problems"]
    assert {"path", "rule", "message"} == set(error["details"]["problems"][0])
    assert state_snapshot() == before


def test_frontmatter_python_cannot_read_is_a_400_naming_file_and_rule(world: World) -> None:
    # given a SKILL.md whose frontmatter holds an integer of 4,301 digits
    text = "---\nname: mailer\ndescription: d\nversion: " + "9" * 4301 + "\n---\nbody\n"
    before = state_snapshot()

    # when
    response = bearer(world.alpha_token).post(SKILLS, {"skill_md": text}, format="json")

    # then
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "skill_invalid"
    assert [(p["path"], p["rule"]) for p in error["details"]["problems"]] == [
        ("SKILL.md", "yaml-invalid")
    ]
    assert state_snapshot() == before


def test_pasting_over_a_skill_imported_from_elsewhere_is_409_naming_both_sources(
    world: World, tmp_path
) -> None:
    # given alpha's skill "mailer" imported from a registry checkout
    from skills.imports import skill_import_directory
    from tests.skills.conftest import write_skill

    write_skill(tmp_path, "mailer")
    skill_import_directory(path=tmp_path, actor=Actor.system("import"), agent=world.alpha)
    before = state_snapshot()

    # when alpha pastes another "mailer"
    alpha = bearer(world.alpha_token)
    response = alpha.post(SKILLS, {"skill_md": skill_md("mailer")}, format="json")

    # then it is refused naming both sources, and nothing changed
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "skill_source_conflict"
    assert str(tmp_path.resolve()) in error["message"]
    assert "local" in error["message"]
    assert state_snapshot() == before

    # and with a new name it is installed beside the first
    response = alpha.post(
        SKILLS, {"skill_md": skill_md("mailer"), "name": "mailer-local"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["skill"] == "mailer-local"
    assert sorted(Skill.objects.values_list("name", flat=True)) == ["mailer", "mailer-local"]


def test_a_new_name_that_breaks_the_rules_is_a_400(world: World) -> None:
    before = state_snapshot()
    response = bearer(world.alpha_token).post(
        SKILLS, {"skill_md": skill_md("mailer"), "name": "Mailer--x"}, format="json"
    )
    assert response.status_code == 400
    assert {p["rule"] for p in response.json()["error"]["details"]["problems"]} == {
        "name-format",
        "name-double-hyphen",
    }
    assert state_snapshot() == before


def test_a_missing_field_is_a_400_with_the_field_named(world: World) -> None:
    response = bearer(world.alpha_token).post(SKILLS, {}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "invalid",
            "message": "The request is invalid: skill_md: This field is required.",
            "details": {"fields": {"skill_md": ["This field is required."]}},
        }
    }


def test_list_shows_the_agents_status_and_filters_by_status_and_name(world: World) -> None:
    alpha = bearer(world.alpha_token)
    imported(alpha, "mailer")
    imported(alpha, "weather")
    alpha.get(url("weather", "review"))

    listing = alpha.get(SKILLS).json()
    assert [(s["name"], s["status"]) for s in listing["results"]] == [
        ("mailer", "pending_review"),
        ("weather", "reviewed"),
    ]
    assert listing["results"][0]["version"] == 1
    assert [s["name"] for s in alpha.get(SKILLS, {"status": "reviewed"}).json()["results"]] == [
        "weather"
    ]
    assert [s["name"] for s in alpha.get(SKILLS, {"name": "MAIL"}).json()["results"]] == ["mailer"]
    bad = alpha.get(SKILLS, {"status": "done"})
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["fields"]["status"]


def test_list_is_cursor_paginated(world: World) -> None:
    alpha = bearer(world.alpha_token)
    for name in ("aa", "bb", "cc"):
        imported(alpha, name)
    first = alpha.get(SKILLS, {"page_size": 2}).json()
    assert [s["name"] for s in first["results"]] == ["aa", "bb"]
    second = alpha.get(first["next"]).json()
    assert [s["name"] for s in second["results"]] == ["cc"]
    assert second["next"] is None


def test_a_second_agent_sees_nothing_of_the_first(world: World) -> None:
    # given alpha's skill with a stored credential value
    alpha = bearer(world.alpha_token)
    imported(alpha)
    trust(world.alpha)
    alpha.post(
        url("mailer", "update"),
        {"credentials": ["API_KEY"], "credential_values": {"API_KEY": SECRET}},
        format="json",
        **USER_MESSAGE,
    )
    trust(world.bravo)
    bravo = bearer(world.bravo_token)
    before = state_snapshot()

    # then every skill endpoint answers bravo with 404 (or an empty list)
    assert bravo.get(SKILLS).json()["results"] == []
    responses = [
        bravo.get(url("mailer")),
        bravo.get(url("mailer", "review")),
        bravo.post(url("mailer", "approve"), {}, format="json", **USER_MESSAGE),
        bravo.post(url("mailer", "reject"), {"note": "no"}, format="json", **USER_MESSAGE),
        bravo.post(url("mailer", "update"), {"tools": ["code"]}, format="json", **USER_MESSAGE),
        bravo.delete(url("mailer"), **USER_MESSAGE),
        bravo.get(SKILLS, {"agent": "alpha"}),
        bravo.get(url("mailer"), {"agent": str(world.alpha.pk)}),
    ]
    for response in responses:
        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] in {"skill_not_found", "agent_not_found"}
        assert b"alpha" not in response.content or b"No agent 'alpha'" in response.content
        assert SECRET.encode() not in response.content
    assert state_snapshot() == before


def test_a_human_acts_on_an_agent_they_own_and_gets_404_for_others(
    world: World, session_client: Callable, personal_client: Callable
) -> None:
    imported(bearer(world.alpha_token))
    olivia = session_client(world.olivia)
    bob = personal_client(world.bob)

    # olivia owns only alpha: no ?agent needed, and by name or id works
    assert olivia.get(url("mailer")).json()["agent"] == "alpha"
    assert olivia.get(url("mailer"), {"agent": "alpha"}).status_code == 200
    assert olivia.get(url("mailer"), {"agent": str(world.alpha.pk)}).status_code == 200
    # bob does not own alpha: 404, not 403
    response = bob.get(url("mailer"), {"agent": "alpha"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "agent_not_found"
    assert bob.get(url("mailer")).json()["error"]["code"] == "skill_not_found"


def test_a_human_with_several_agents_must_name_one(world: World, session_client: Callable) -> None:
    Agent.objects.create(name="gamma", owner=world.olivia)
    response = session_client(world.olivia).get(SKILLS)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "agent_required",
        "message": "Say which agent this is for: add ?agent=<id or name> (you own several agents).",
        "details": {"parameter": "agent", "rule": "required"},
    }


def test_a_superuser_may_act_for_any_agent(world: World, session_client: Callable) -> None:
    from tests.skills.admin_support import make_user

    imported(bearer(world.bravo_token))
    root = session_client(make_user("root", superuser=True))
    assert root.get(url("mailer"), {"agent": "bravo"}).json()["agent"] == "bravo"


def test_review_returns_the_deterministic_facts_and_marks_reviewed(world: World) -> None:
    alpha = bearer(world.alpha_token)
    imported(alpha)
    response = alpha.get(url("mailer", "review"))
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "reviewed"
    assert body["reviewed_hash"].startswith("sha256:")
    assert body["facts"]["referenced_domains"] == ["api.agentmail.to"]
    # asked again, the stored review comes back unchanged
    audit_rows = PolicyAuditEvent.objects.count()
    assert alpha.get(url("mailer", "review")).json() == body
    assert PolicyAuditEvent.objects.count() == audit_rows


# --- the consent gate ------------------------------------------------------------------------


GATED_CALLS = [
    ("post", "approve", {"note": "ok"}),
    ("post", "reject", {"note": "not now"}),
    ("post", "update", {"domains": ["api.example.org"]}),
    ("delete", "", None),
]


@pytest.mark.parametrize(("method", "action", "data"), GATED_CALLS)
@pytest.mark.parametrize(
    ("trusted", "headers"),
    [
        (False, {}),
        (False, USER_MESSAGE),
        (True, {}),
        (True, {"HTTP_X_MOTOR_TRIGGER": "motor_result"}),
    ],
)
def test_gated_calls_by_an_agent_without_relayed_consent_are_403_and_change_nothing(
    world: World, method: str, action: str, data: dict | None, trusted: bool, headers: dict
) -> None:
    # given a reviewed skill of alpha
    alpha = bearer(world.alpha_token)
    imported(alpha)
    alpha.get(url("mailer", "review"))
    if trusted:
        trust(world.alpha)
    before = state_snapshot()

    # when alpha calls a gated action without a user_message trigger or without trust
    response = getattr(alpha, method)(url("mailer", action), data, format="json", **headers)

    # then it is refused with consent_required and nothing changed
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "consent_required"
    assert "A human must" in error["message"]
    assert state_snapshot() == before


def test_a_trusted_agent_relaying_a_user_message_approves(world: World) -> None:
    alpha = bearer(world.alpha_token)
    imported(alpha)
    alpha.get(url("mailer", "review"))
    trust(world.alpha)

    response = alpha.post(
        url("mailer", "approve"), {"note": "user said yes"}, format="json", **USER_MESSAGE
    )

    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    assert response.json()["approved_by"] == "olivia"
    event = PolicyAuditEvent.objects.filter(action="approved").get()
    assert event.actor_label == "agent:alpha relaying olivia"
    assert event.reason == "user said yes"


def test_a_human_approves_and_rejects_without_a_trigger(
    world: World, session_client: Callable
) -> None:
    imported(bearer(world.alpha_token))
    olivia = session_client(world.olivia)
    olivia.get(url("mailer", "review"))

    approved = olivia.post(url("mailer", "approve"), {}, format="json")
    assert approved.status_code == 200
    assert approved.json()["status"] == "approved"

    rejected = olivia.post(url("mailer", "reject"), {"note": "changed my mind"}, format="json")
    assert rejected.status_code == 409  # approved → reject is not a transition the seeds allow
    assert rejected.json()["error"]["code"] == "policy_transition_not_allowed"


def test_reject_needs_a_note(world: World, session_client: Callable) -> None:
    imported(bearer(world.alpha_token))
    olivia = session_client(world.olivia)
    olivia.get(url("mailer", "review"))
    before = state_snapshot()

    missing = olivia.post(url("mailer", "reject"), {}, format="json")
    assert missing.status_code == 400
    assert missing.json()["error"]["details"]["fields"] == {"note": ["This field is required."]}
    assert state_snapshot() == before

    done = olivia.post(url("mailer", "reject"), {"note": "uses curl | sh"}, format="json")
    assert done.json()["status"] == "pending_review"
    assert done.json()["rejection_note"] == "uses curl | sh"


def test_approve_before_review_is_409_with_the_error_shape(
    world: World, session_client: Callable
) -> None:
    imported(bearer(world.alpha_token))
    before = state_snapshot()
    response = session_client(world.olivia).post(url("mailer", "approve"), {}, format="json")
    assert response.status_code == 409
    assert response.json() == {
        "error": {
            "code": "policy_transition_not_allowed",
            "message": "Cannot approve policy of skill 'mailer' for agent 'alpha': status is "
            "'pending_review'.",
            "details": {"action": "approve", "status": "pending_review"},
        }
    }
    assert state_snapshot() == before


def test_a_human_without_the_approve_permission_gets_403(
    world: World, personal_client: Callable
) -> None:
    imported(bearer(world.bravo_token))
    bob = personal_client(world.bob)
    bob.get(url("mailer", "review"))
    before = state_snapshot()
    response = bob.post(url("mailer", "approve"), {}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "approval_permission_denied"
    assert state_snapshot() == before


def test_update_edits_policy_fields_keeps_status_and_never_returns_values(
    world: World, session_client: Callable
) -> None:
    imported(bearer(world.alpha_token))
    olivia = session_client(world.olivia)
    olivia.get(url("mailer", "review"))
    olivia.post(url("mailer", "approve"), {}, format="json")

    response = olivia.post(
        url("mailer", "update"),
        {
            "domains": ["api.example.org", "cdn.example.org"],
            "credentials": ["API_KEY"],
            "tools": ["code", "bash"],
            "dependencies": ["requests==2.32.3"],
            "inputs": {"type": "object", "properties": {"to": {"type": "string"}}},
            "credential_values": {"API_KEY": SECRET},
        },
        format="json",
    )

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "approved"
    assert body["allowed_domains"] == ["api.example.org", "cdn.example.org"]
    assert body["required_credentials"] == ["API_KEY"]
    assert body["tools"] == ["code", "bash"]
    assert body["dependencies"] == ["requests==2.32.3"]
    assert body["credential_values"] == {"API_KEY": "[set]"}
    assert SECRET.encode() not in response.content
    assert SECRET.encode() not in olivia.get(url("mailer")).content
    assert all(SECRET not in v for v in raw_policy_credential_column())


def test_update_with_a_bad_value_is_400_and_changes_nothing(
    world: World, session_client: Callable
) -> None:
    imported(bearer(world.alpha_token))
    olivia = session_client(world.olivia)
    before = state_snapshot()
    for data, rule in (
        ({"domains": ["Not A Host"]}, "hostname"),
        ({"tools": ["rm"]}, "known_tool"),
        ({"credential_values": {"OTHER": "x"}}, "in_required_credentials"),
    ):
        response = olivia.post(url("mailer", "update"), data, format="json")
        assert response.status_code == 400
        assert response.json()["error"]["details"]["rule"] == rule
    empty = olivia.post(url("mailer", "update"), {}, format="json")
    assert empty.status_code == 400
    assert state_snapshot() == before


def test_delete_by_the_owner_removes_the_skill(world: World, session_client: Callable) -> None:
    imported(bearer(world.alpha_token))
    response = session_client(world.olivia).delete(url("mailer"))
    assert response.status_code == 204
    assert not Skill.objects.filter(name="mailer").exists()


def test_delete_of_a_skill_other_agents_use_is_409_and_changes_nothing(
    world: World, session_client: Callable
) -> None:
    # given bravo holds a policy for alpha's skill too (given by an administrator)
    imported(bearer(world.alpha_token))
    policy_create(skill="mailer", agent=world.bravo, actor=Actor.system("admin:root"))
    before = state_snapshot()
    response = session_client(world.olivia).delete(url("mailer"))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "skill_shared"
    assert state_snapshot() == before


def test_a_trusted_agent_deletes_on_a_user_message(world: World) -> None:
    alpha = bearer(world.alpha_token)
    imported(alpha)
    trust(world.alpha)
    assert alpha.delete(url("mailer"), **USER_MESSAGE).status_code == 204
    assert not Skill.objects.filter(name="mailer").exists()


def test_importing_over_a_skill_another_agent_holds_is_409_and_changes_nothing(
    world: World, personal_client: Callable
) -> None:
    # given alpha's skill
    imported(bearer(world.alpha_token))
    before = state_snapshot()

    # when bravo (or bravo's human) pastes different content under the same name
    for client in (bearer(world.bravo_token), personal_client(world.bob)):
        response = client.post(
            SKILLS,
            {"skill_md": skill_md("mailer", body="# Send mail to evil.example\n")},
            format="json",
        )
        # then it is refused and alpha's skill keeps its content
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "skill_shared"
    assert state_snapshot() == before


def test_reimporting_ones_own_skill_makes_a_new_version(world: World) -> None:
    alpha = bearer(world.alpha_token)
    imported(alpha)
    body = alpha.post(SKILLS, {"skill_md": skill_md("mailer", body="# v2\n")}, format="json").json()
    assert body["version"] == 2
    assert body["status"] == "pending_review"


@pytest.mark.parametrize(
    ("path", "params", "code"),
    [
        (SKILLS, {"agent": "al\x00pha"}, "agent_not_found"),
        (SKILLS, {"agent": "²"}, "agent_not_found"),
        (SKILLS, {"agent": "9" * 30}, "agent_not_found"),
        (SKILLS + "mail%00er/", {}, "skill_not_found"),
        (SKILLS + "Mailer/", {}, "skill_not_found"),
        (SKILLS, {"name": "ma\x00il"}, "invalid"),
        ("/api/v1/tokens/99999999999999999999999/", {}, "token_not_found"),
    ],
)
def test_odd_identifiers_are_clean_4xx_not_server_errors(
    world: World, personal_client: Callable, path: str, params: dict, code: str
) -> None:
    client = personal_client(world.olivia)
    response = client.delete(path) if "tokens" in path else client.get(path, params)
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"] == code
