"""The vault: names normalised, values encrypted at rest, resolution policy → vault."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet

from cognition.errors import CredentialInvalid, CredentialNotFound, CredentialsMissing
from cognition.models import Credential
from cognition.selectors import credential_list_names, credentials_resolve
from cognition.services import credential_delete, credential_set
from skills.errors import CredentialsUnreadable
from skills.imports import skill_import_pasted
from skills.policy_edits import policy_update
from skills.services import Actor

from .conftest import SECRET, World, raw_credential_column, skill_md

pytestmark = pytest.mark.django_db


def test_set_drops_the_vault_prefix_and_stores_only_ciphertext(world: World) -> None:
    # when a seed-style VAULT_ name is stored
    credential_set(agent=world.alpha, name="VAULT_API_KEY", value=SECRET, actor=world.olivia)

    # then it is listed without the prefix and the column holds no plaintext
    assert credential_list_names(agent=world.alpha) == ["API_KEY"]
    column = raw_credential_column()
    assert len(column) == 1
    assert SECRET not in column[0]
    assert "API_KEY" not in column[0]
    assert credentials_resolve(agent=world.alpha, names=["API_KEY"]) == {"API_KEY": SECRET}


def test_set_replaces_the_value_and_keeps_one_row(world: World) -> None:
    credential_set(agent=world.alpha, name="TOKEN", value="first", actor=None)
    credential_set(agent=world.alpha, name="TOKEN", value="second", actor=None)
    assert Credential.objects.filter(agent=world.alpha).count() == 1
    assert credentials_resolve(agent=world.alpha, names=["TOKEN"]) == {"TOKEN": "second"}


@pytest.mark.parametrize(
    ("name", "rule"),
    [("1ABC", "credential_name"), ("has-dash", "credential_name"), ("A" * 65, "credential_name")],
)
def test_bad_names_are_refused_naming_the_rule(world: World, name: str, rule: str) -> None:
    with pytest.raises(CredentialInvalid) as caught:
        credential_set(agent=world.alpha, name=name, value="x", actor=None)
    assert caught.value.details["rule"] == rule
    assert Credential.objects.count() == 0


def test_an_empty_value_is_refused(world: World) -> None:
    with pytest.raises(CredentialInvalid) as caught:
        credential_set(agent=world.alpha, name="TOKEN", value="", actor=None)
    assert caught.value.details == {"field": "value", "rule": "non_empty_string", "name": "TOKEN"}
    assert Credential.objects.count() == 0


def test_delete_removes_and_a_missing_name_is_not_found(world: World) -> None:
    credential_set(agent=world.alpha, name="TOKEN", value="x", actor=None)
    credential_delete(agent=world.alpha, name="VAULT_TOKEN", actor=None)
    assert credential_list_names(agent=world.alpha) == []
    with pytest.raises(CredentialNotFound):
        credential_delete(agent=world.alpha, name="TOKEN", actor=None)


def test_resolve_prefers_policy_values_then_vault_and_names_every_missing_one(
    world: World,
) -> None:
    # given a policy value for A, vault values for A and B, nothing for C and D
    result = skill_import_pasted(
        text=skill_md("mailer"), actor=Actor.system("test"), agent=world.alpha
    )
    policy = policy_update(
        policy=result.policy,
        actor=Actor.system("test"),
        required_credentials=["A", "B"],
        set_credentials={"A": "from-policy"},
    )
    credential_set(agent=world.alpha, name="A", value="from-vault-a", actor=None)
    credential_set(agent=world.alpha, name="B", value="from-vault-b", actor=None)

    # then the policy wins for A, the vault supplies B
    assert credentials_resolve(agent=world.alpha, names=["A", "VAULT_B"], policy=policy) == {
        "A": "from-policy",
        "B": "from-vault-b",
    }
    # and a resolution with missing names names all of them
    with pytest.raises(CredentialsMissing) as caught:
        credentials_resolve(agent=world.alpha, names=["A", "D", "C"], policy=policy)
    assert caught.value.names == ["C", "D"]
    assert caught.value.details == {"missing": ["C", "D"]}
    assert "C, D" in caught.value.message


def test_another_agents_vault_is_not_consulted(world: World) -> None:
    credential_set(agent=world.bravo, name="TOKEN", value=SECRET, actor=None)
    with pytest.raises(CredentialsMissing):
        credentials_resolve(agent=world.alpha, names=["TOKEN"])


def test_a_value_moved_to_another_row_is_refused(world: World) -> None:
    # given two credentials, when one row's ciphertext is copied into the other
    a = credential_set(agent=world.alpha, name="A", value="aaa", actor=None)
    credential_set(agent=world.alpha, name="B", value="bbb", actor=None)
    Credential.objects.filter(agent=world.alpha, name="B").update(value=a.value)

    # then reading B refuses the foreign ciphertext
    with pytest.raises(CredentialsUnreadable):
        credentials_resolve(agent=world.alpha, names=["B"])


def test_rotation_old_values_decrypt_after_a_new_key_is_prepended(world: World, settings) -> None:
    credential_set(agent=world.alpha, name="TOKEN", value=SECRET, actor=None)
    old_key = settings.MOTOR_CREDENTIALS_KEY
    settings.MOTOR_CREDENTIALS_KEY = Fernet.generate_key().decode() + "," + old_key
    assert credentials_resolve(agent=world.alpha, names=["TOKEN"]) == {"TOKEN": SECRET}
    settings.MOTOR_CREDENTIALS_KEY = Fernet.generate_key().decode()
    with pytest.raises(CredentialsUnreadable):
        credentials_resolve(agent=world.alpha, names=["TOKEN"])


def test_debug_without_a_key_stores_plaintext_with_a_warning(
    world: World, settings, caplog: pytest.LogCaptureFixture
) -> None:
    settings.DEBUG = True
    settings.MOTOR_CREDENTIALS_KEY = ""
    with caplog.at_level(logging.WARNING):
        credential_set(agent=world.alpha, name="TOKEN", value="dev-value", actor=None)
    assert "stored unencrypted" in caplog.text
    assert "dev-value" not in caplog.text
    assert raw_credential_column()[0].startswith("plain:")


def test_logs_name_the_credential_but_never_the_value(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        credential_set(agent=world.alpha, name="TOKEN", value=SECRET, actor=world.olivia)
    assert "name=TOKEN value=[set]" in caplog.text
    assert SECRET not in caplog.text


def test_the_runtime_resolver_reads_the_agents_vault_by_id(world: World) -> None:
    from cognition.selectors import credentials_for_run

    credential_set(agent=world.alpha, name="TOKEN", value=SECRET, actor=None)
    assert credentials_for_run(agent_id=world.alpha.pk, names=["TOKEN"]) == {"TOKEN": SECRET}
    with pytest.raises(CredentialsMissing):
        credentials_for_run(agent_id=world.bravo.pk, names=["TOKEN"])


def test_the_database_refuses_a_bad_name_and_a_duplicate_even_without_the_service(
    world: World,
) -> None:
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Credential.objects.create(agent=world.alpha, name="1BAD", value="x")
    Credential.objects.create(agent=world.alpha, name="OK", value="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        Credential.objects.create(agent=world.alpha, name="OK", value="y")
    assert list(Credential.objects.values_list("name", flat=True)) == ["OK"]
