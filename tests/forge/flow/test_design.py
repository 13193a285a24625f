"""Reading the answers to the designing questions (pure)."""

from __future__ import annotations

import pytest

from forge.design import (
    CREDENTIALS,
    DOMAINS,
    AnswerUnclear,
    next_topic,
    parse_credentials,
    parse_domains,
)


@pytest.mark.parametrize(
    ("answer", "hosts"),
    [
        ("status.myapp.io and api.myapp.io", ["status.myapp.io", "api.myapp.io"]),
        ("https://Status.MyApp.io/health, status.myapp.io", ["status.myapp.io"]),
        ("none", []),
        ("No.", []),
    ],
)
def test_domains_are_read_from_hosts_and_urls(answer, hosts):
    assert parse_domains(answer) == hosts


def test_an_answer_without_a_host_is_unclear():
    with pytest.raises(AnswerUnclear, match="No host name found"):
        parse_domains("the usual ones")


@pytest.mark.parametrize(
    ("answer", "names"),
    [
        ("it needs MYAPP_API_KEY", ["MYAPP_API_KEY"]),
        ("OWM_KEY and HETZNER_TOKEN, OWM_KEY", ["OWM_KEY", "HETZNER_TOKEN"]),
        ("none", []),
    ],
)
def test_credential_names_are_read_never_values(answer, names):
    assert parse_credentials(answer) == names


@pytest.mark.parametrize("secret", ["here it is: sk-live-abc123", "AKIA4F7QX2LMN8ZP", "ghp_x9Y"])
def test_a_value_instead_of_a_name_is_unclear(secret):
    with pytest.raises(AnswerUnclear, match="Never the value itself"):
        parse_credentials(secret)


def test_the_questions_come_in_order_until_both_are_known():
    assert next_topic(allowed_domains=None, credentials=None) == DOMAINS
    assert next_topic(allowed_domains=[], credentials=None) == CREDENTIALS
    assert next_topic(allowed_domains=[], credentials=[]) is None
