"""Encryption at rest of credential values: MultiFernet, rotation, DEBUG plaintext fallback."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from skills.crypto import PLAINTEXT_PREFIX, decrypt_json, encrypt_json
from skills.errors import CredentialsUnreadable


def test_round_trip_hides_the_plaintext(settings):
    # given
    settings.MOTOR_CREDENTIALS_KEY = Fernet.generate_key().decode()

    # when
    token = encrypt_json({"API_KEY": "sk-secret-value"})

    # then
    assert "sk-secret-value" not in token
    assert "API_KEY" not in token
    assert decrypt_json(token) == {"API_KEY": "sk-secret-value"}


def test_empty_values_store_as_empty_string(settings):
    settings.MOTOR_CREDENTIALS_KEY = Fernet.generate_key().decode()
    assert encrypt_json({}) == ""
    assert decrypt_json("") == {}


def test_rotation_keeps_old_values_readable(settings):
    # given a value written under the old key
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.MOTOR_CREDENTIALS_KEY = old
    token = encrypt_json({"A": "1"})

    # when a new key is put first
    settings.MOTOR_CREDENTIALS_KEY = f"{new},{old}"

    # then old values still decrypt and new writes use the new key
    assert decrypt_json(token) == {"A": "1"}
    fresh = encrypt_json({"A": "1"})
    settings.MOTOR_CREDENTIALS_KEY = new
    assert decrypt_json(fresh) == {"A": "1"}
    with pytest.raises(CredentialsUnreadable):
        decrypt_json(token)


def test_wrong_key_is_a_clear_error(settings):
    # given
    settings.MOTOR_CREDENTIALS_KEY = Fernet.generate_key().decode()
    token = encrypt_json({"A": "1"})
    settings.MOTOR_CREDENTIALS_KEY = Fernet.generate_key().decode()

    # when / then
    with pytest.raises(CredentialsUnreadable, match="cannot be decrypted"):
        decrypt_json(token)


def test_debug_without_key_stores_marked_plaintext_and_warns(settings, caplog):
    # given
    settings.DEBUG = True
    settings.MOTOR_CREDENTIALS_KEY = ""

    # when
    with caplog.at_level(logging.WARNING, logger="skills.crypto"):
        token = encrypt_json({"A": "sk-plain-zzz"})

    # then
    assert token == PLAINTEXT_PREFIX + '{"A":"sk-plain-zzz"}'
    assert decrypt_json(token) == {"A": "sk-plain-zzz"}
    assert "stored unencrypted" in caplog.text
    assert "sk-plain-zzz" not in caplog.text


def test_without_key_outside_debug_refuses(settings):
    settings.DEBUG = False
    settings.MOTOR_CREDENTIALS_KEY = ""
    with pytest.raises(ImproperlyConfigured):
        encrypt_json({"A": "1"})


def test_malformed_key_is_a_configuration_error(settings):
    settings.MOTOR_CREDENTIALS_KEY = "not-a-fernet-key"
    with pytest.raises(ImproperlyConfigured, match="Fernet keys"):
        encrypt_json({"A": "1"})
