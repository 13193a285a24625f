"""Credential redaction of output and placeholder substitution in arguments."""

from __future__ import annotations

import base64
import urllib.parse

import pytest

from sandbox.tools import (
    UnknownCredential,
    placeholders_to_env_refs,
    redact,
    substitute_placeholders,
)


def test_raw_and_encoded_values_are_replaced_by_placeholders() -> None:
    # given a secret and output that contains it raw, URL-encoded, JSON-escaped and base64
    secret = 'p@ss "w/rd" 42'
    text = (
        f"raw={secret} url={urllib.parse.quote(secret, safe='')} "
        f"json={secret.replace(chr(34), chr(92) + chr(34))} "
        f"b64={base64.b64encode(secret.encode()).decode()}"
    )
    # when redacted
    out = redact(text, {"DB_PASSWORD": secret})
    # then every form is masked
    assert out == (
        "raw=<credential:DB_PASSWORD> url=<credential:DB_PASSWORD> "
        "json=<credential:DB_PASSWORD> b64=<credential:DB_PASSWORD>"
    )


def test_longest_value_wins_when_one_secret_contains_another() -> None:
    # given two credentials where one value is a prefix of the other
    creds = {"SHORT": "abcd1234", "LONG": "abcd1234-extended"}
    # when output containing both is redacted
    out = redact("x abcd1234-extended y abcd1234 z", creds)
    # then the long one is masked whole and the short one separately
    assert out == "x <credential:LONG> y <credential:SHORT> z"


def test_values_shorter_than_four_characters_are_left_alone() -> None:
    assert redact("a 1 b abc", {"PIN": "abc", "ONE": "1"}) == "a 1 b abc"
    assert redact("a abcd b", {"PIN": "abcd"}) == "a <credential:PIN> b"


def test_placeholders_are_substituted_at_any_depth() -> None:
    # given arguments with placeholders in nested strings
    args = {
        "url": "https://x.test/?k=<credential:KEY>",
        "headers": {"Authorization": "Bearer <credential:TOKEN>"},
        "list": ["<credential:KEY>", 3],
    }
    # when substituted
    out = substitute_placeholders(args, {"KEY": "k-123", "TOKEN": "t-456"})
    # then each is replaced and the input is untouched
    assert out == {
        "url": "https://x.test/?k=k-123",
        "headers": {"Authorization": "Bearer t-456"},
        "list": ["k-123", 3],
    }
    assert args["headers"] == {"Authorization": "Bearer <credential:TOKEN>"}


def test_unknown_placeholders_are_refused_by_name() -> None:
    with pytest.raises(UnknownCredential) as caught:
        substitute_placeholders(
            {"a": "<credential:NOPE> <credential:KEY> <credential:ALSO>"}, {"KEY": "v"}
        )
    assert caught.value.names == ["NOPE", "ALSO"]
    assert str(caught.value) == (
        "unknown credential placeholder(s): <credential:NOPE>, <credential:ALSO>; "
        "only credentials granted to this run can be used"
    )


def test_shell_placeholders_become_variable_references_not_values() -> None:
    # given a value with shell metacharacters
    creds = {"TOKEN": "x'; cat /etc/passwd; echo '"}
    # when a command's placeholder is converted
    command = placeholders_to_env_refs('curl -H "Authorization: <credential:TOKEN>" u', creds)
    # then the command text carries a reference, never the value
    assert command == 'curl -H "Authorization: ${TOKEN}" u'
