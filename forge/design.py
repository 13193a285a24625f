"""Designing: the clarifying questions (seed 002 §4, §15) and the reading of their answers.

Pure functions. Two things must be known before code is written: which hosts the tool may reach
(its domain allowlist) and which vault entries it needs (names only). Whatever the start request
already said is not asked again.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

DOMAINS = "domains"
CREDENTIALS = "credentials"

QUESTIONS = {
    DOMAINS: (
        "Which web addresses should the tool be able to reach? Give the host names (for example "
        "status.myapp.io, api.myapp.io), or answer 'none' if it needs no network. Only these "
        "will be reachable from its sandbox."
    ),
    CREDENTIALS: (
        "Does the tool need credentials such as an API key or a token? Answer with the names of "
        "the vault entries it should use (for example MYAPP_API_KEY), or 'none'. Never send a "
        "value here: it is set in the admin (Credentials) or with PUT /api/v1/credentials/<name>/."
    ),
}

_NONE_WORDS = frozenset(
    {"none", "no", "nothing", "nope", "n/a", "-", "no network", "no credentials"}
)
_HOST = re.compile(
    r"^(?=.{1,253}$)(?:\*\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$"
)
#: a vault entry name (cognition.vault's pattern: letters, digits, underscores, a letter first)
CREDENTIAL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
# Upper-case names with underscores (MYAPP_API_KEY) or letters only (TOKEN): a pasted secret,
# mixed case or a run of letters and digits, is never taken for a name (nor stored).
_CREDENTIAL_WORD = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\b[A-Z]{2,}\b")


class AnswerUnclear(ValueError):
    """The answer could not be read; the message says what the question needs."""


def next_topic(*, allowed_domains: list[str] | None, credentials: list[str] | None) -> str | None:
    """The next question to ask, or None when the requirements are complete."""
    if allowed_domains is None:
        return DOMAINS
    if credentials is None:
        return CREDENTIALS
    return None


def _is_none(answer: str) -> bool:
    return answer.strip().lower().rstrip(".!") in _NONE_WORDS


def host_of(token: str) -> str | None:
    """The host a token names (a bare host name or a URL), lower-cased; None if neither."""
    token = token.strip().strip(",;()[]<>'\"").rstrip(".").lower()
    if not token:
        return None
    if "://" in token:
        token = urlsplit(token).hostname or ""
    else:
        token = token.split("/", 1)[0].split(":", 1)[0]
    return token if _HOST.match(token) else None


def parse_domains(answer: str) -> list[str]:
    """The host names of an answer to the domains question, in order, without repeats."""
    if _is_none(answer):
        return []
    hosts: list[str] = []
    for token in re.split(r"[\s,;]+", answer):
        host = host_of(token)
        if host and host not in hosts:
            hosts.append(host)
    if not hosts:
        raise AnswerUnclear(
            "No host name found in the answer: give host names such as status.myapp.io, or 'none'."
        )
    return hosts


def parse_credentials(answer: str) -> list[str]:
    """The vault entry names of an answer to the credentials question (upper-case names such
    as MYAPP_API_KEY), in order, without repeats."""
    if _is_none(answer):
        return []
    names: list[str] = []
    for name in _CREDENTIAL_WORD.findall(answer):
        if CREDENTIAL_NAME.match(name) and name not in names:
            names.append(name)
    if not names:
        raise AnswerUnclear(
            "No vault entry name found in the answer: give names such as MYAPP_API_KEY (upper "
            "case, underscores), or 'none'. Never the value itself."
        )
    return names


def valid_domain(value: object) -> bool:
    return isinstance(value, str) and host_of(value) == value.lower() and "/" not in value
