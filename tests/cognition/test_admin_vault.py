"""The vault, energy and relayed-consent trust in the admin console."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cognition.models import Agent, Credential
from cognition.selectors import credentials_resolve
from cognition.services import credential_set
from runs.models import MotorRun, RunEvent, RunStatus
from runs.services import run_start
from tests.runs.helpers import drive, new_workspace
from tests.skills.admin_support import make_user

from .conftest import SECRET, World, raw_credential_column
from .worker_support import clean_run_queue  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def test_adding_a_credential_in_the_admin_encrypts_it_and_no_page_shows_it(world: World) -> None:
    root = make_user("root", superuser=True)
    client = Client()
    client.force_login(root)

    response = client.post(
        reverse("admin:cognition_credential_add"),
        {"agent": world.alpha.pk, "name": "VAULT_API_KEY", "secret": SECRET},
    )

    assert response.status_code == 302
    assert credentials_resolve(agent=world.alpha, names=["API_KEY"]) == {"API_KEY": SECRET}
    assert all(SECRET not in v for v in raw_credential_column())
    credential = Credential.objects.get()
    pages = [
        client.get(reverse("admin:cognition_credential_changelist")),
        client.get(reverse("admin:cognition_credential_change", args=[credential.pk])),
    ]
    for page in pages:
        assert page.status_code == 200
        assert b"[set]" in page.content
        assert SECRET.encode() not in page.content
        assert credential.value.encode() not in page.content


def test_a_new_credential_without_a_value_is_refused(world: World) -> None:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    response = client.post(
        reverse("admin:cognition_credential_add"), {"agent": world.alpha.pk, "name": "TOKEN"}
    )
    assert response.status_code == 200
    assert b"A new credential needs a value." in response.content
    assert Credential.objects.count() == 0


def test_a_staff_user_sees_only_credentials_of_agents_they_own(world: World) -> None:
    credential_set(agent=world.alpha, name="ALPHA_KEY", value="a", actor=None)
    credential_set(agent=world.bravo, name="BRAVO_KEY", value="b", actor=None)
    client = Client()
    client.force_login(make_user("olga", perms=["cognition.view_credential"]))
    Agent.objects.filter(pk=world.alpha.pk).update(owner=client.session["_auth_user_id"])
    page = client.get(reverse("admin:cognition_credential_changelist")).content
    assert b"ALPHA_KEY" in page
    assert b"BRAVO_KEY" not in page


def test_the_agent_list_shows_the_regenerated_energy_and_band(world: World, settings) -> None:
    settings.MOTOR_ENERGY_REGEN_PER_HOUR = 0.1
    Agent.objects.filter(pk=world.alpha.pk).update(
        energy=0.1, last_energy_at=timezone.now() - timedelta(hours=2)
    )
    client = Client()
    client.force_login(make_user("root", superuser=True))
    page = client.get(reverse("admin:cognition_agent_changelist")).content.decode()
    assert "0.30 (no_browser)" in page


def test_only_a_superuser_can_trust_an_agent_to_relay_consent(world: World) -> None:
    staff = Client()
    staff.force_login(make_user("viewer", perms=["cognition.view_agent"]))
    root = Client()
    root.force_login(make_user("root", superuser=True))
    action = {"action": "trust_relayed_consent", "_selected_action": [world.alpha.pk]}
    changelist = reverse("admin:cognition_agent_changelist")

    assert b"trust_relayed_consent" not in staff.get(changelist).content
    staff.post(changelist, action)
    assert Agent.objects.get(pk=world.alpha.pk).trusted_for_relayed_consent is False

    root.post(changelist, action)
    assert Agent.objects.get(pk=world.alpha.pk).trusted_for_relayed_consent is True


def test_a_name_differing_only_in_case_is_refused_on_the_add_form(world: World) -> None:
    # given WEATHER_TOKEN is set for alpha
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="first", actor="t")
    client = Client()
    client.force_login(make_user("root", superuser=True))
    # when another one is added as vault_weather_token
    response = client.post(
        reverse("admin:cognition_credential_add"),
        {"agent": world.alpha.pk, "name": "vault_weather_token", "secret": SECRET},
    )
    # then the form names the existing credential and nothing changed
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["name"] == [
        "Agent 'alpha' already has the credential 'WEATHER_TOKEN' (names match in any case); "
        "open it to replace its value."
    ]
    assert list(Credential.objects.values_list("name", flat=True)) == ["WEATHER_TOKEN"]
    assert credentials_resolve(agent=world.alpha, names=["WEATHER_TOKEN"]) == {
        "WEATHER_TOKEN": "first"
    }


def test_a_bad_name_is_refused_on_the_add_form_with_its_rule(world: World) -> None:
    client = Client()
    client.force_login(make_user("root", superuser=True))
    response = client.post(
        reverse("admin:cognition_credential_add"),
        {"agent": world.alpha.pk, "name": "9lives", "secret": SECRET},
    )
    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["name"]
    assert "Credential name '9lives' is not allowed" in error
    assert Credential.objects.count() == 0


@pytest.mark.usefixtures("clean_run_queue")
def test_setting_a_missing_credential_in_the_admin_resumes_the_run_waiting_for_it(
    world: World, scripted_llm, settings, django_capture_on_commit_callbacks
) -> None:
    # given a run of alpha waiting for api_key, which nobody has set
    settings.MOTOR_CREDENTIAL_RESOLVER = "cognition.core.run_credentials_resolve"
    run_id = run_start(
        workspace=new_workspace(),
        agent_id=world.alpha.pk,
        task="t",
        credential_names=["api_key"],
        actor="t",
    )["run_id"]
    drive(run_id, scripted_llm.client())
    assert MotorRun.objects.get(pk=run_id).status == RunStatus.AWAITING_INPUT
    client = Client()
    client.force_login(make_user("root", superuser=True))
    # when a human adds it in the admin (as the seeds spell it)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:cognition_credential_add"),
            {"agent": world.alpha.pk, "name": "VAULT_API_KEY", "secret": SECRET},
        )
    # then it is stored and the run goes on
    assert response.status_code == 302
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.missing_credentials) == (RunStatus.RUNNING, [])
    event = RunEvent.objects.filter(run_id=run_id).order_by("id").last()
    assert (event.actor, event.detail) == ("root", {"credentials_provided": True})
