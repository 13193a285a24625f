"""Credential placeholders in tool arguments and credential values in tool output.

The LLM never sees a credential value. It writes ``<credential:NAME>`` in tool arguments; the
executor substitutes the value at execution time, and every occurrence of a value in what comes
back is replaced by the same placeholder before a ToolResult leaves the library.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

#: values shorter than this are not masked: a 1-3 character "secret" would turn ordinary output
#: into noise, and is no secret worth the name (stores should refuse such values)
MIN_SECRET_LENGTH = 4

PLACEHOLDER = re.compile(r"<credential:([A-Za-z0-9_.\-]+)>")

T = TypeVar("T")


class UnknownCredential(Exception):
    """A placeholder names a credential that this call was not given."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(
            "unknown credential placeholder(s): "
            + ", ".join(f"<credential:{n}>" for n in names)
            + "; only credentials granted to this run can be used"
        )


def placeholder(name: str) -> str:
    return f"<credential:{name}>"


def _variants(value: str) -> set[str]:
    """The raw value and the encodings in which it commonly resurfaces in output."""
    variants = {value}
    variants.add(urllib.parse.quote(value, safe=""))
    variants.add(urllib.parse.quote_plus(value))
    variants.add(json.dumps(value)[1:-1])
    encoded = base64.b64encode(value.encode()).decode()
    variants.update((encoded, encoded.rstrip("=")))
    return {v for v in variants if len(v) >= MIN_SECRET_LENGTH}


def redact(text: str, credentials: Mapping[str, str]) -> str:
    """Replace every occurrence of a credential value (raw, URL-encoded, JSON-escaped or
    base64-encoded) in `text` with ``<credential:NAME>``. Longest values are replaced first so
    that a secret containing another secret is masked whole. Values shorter than
    MIN_SECRET_LENGTH characters are left alone."""
    pairs: list[tuple[str, str]] = []
    for name, value in credentials.items():
        if len(value) < MIN_SECRET_LENGTH:
            continue
        pairs.extend((variant, name) for variant in _variants(value))
    for variant, name in sorted(pairs, key=lambda p: len(p[0]), reverse=True):
        if variant in text:
            text = text.replace(variant, placeholder(name))
    return text


def placeholders_in(value: object) -> list[str]:
    """Names of every placeholder in a JSON-like value, in order of appearance, no duplicates."""
    found: list[str] = []
    _collect(value, found)
    return list(dict.fromkeys(found))


def _collect(value: object, found: list[str]) -> None:
    if isinstance(value, str):
        found.extend(PLACEHOLDER.findall(value))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _collect(key, found)
            _collect(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)


def substitute_placeholders(args: T, credentials: Mapping[str, str]) -> T:
    """Return a copy of `args` (a JSON-like value) where every ``<credential:NAME>`` in a string
    (keys and values, at any depth) is replaced by the value of credential NAME.

    Raises UnknownCredential, naming every missing name, when a placeholder names a credential
    not in `credentials`; nothing is substituted in that case.
    """
    missing = [name for name in placeholders_in(args) if name not in credentials]
    if missing:
        raise UnknownCredential(missing)
    return cast(T, _substitute(args, credentials.__getitem__))


def _substitute(value: object, lookup: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: lookup(m.group(1)), value)
    if isinstance(value, Mapping):
        return {_substitute(k, lookup): _substitute(v, lookup) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(item, lookup) for item in value]
    if isinstance(value, tuple):
        return tuple(_substitute(item, lookup) for item in value)
    return value


def placeholders_to_env_refs(command: str, credentials: Mapping[str, str]) -> str:
    """For shell commands: replace ``<credential:NAME>`` with ``${NAME}``, a reference to the
    environment variable that carries the value for this one call. The value itself never
    becomes shell text, so a value containing quotes or ``;`` cannot change the command.
    Write the placeholder inside double quotes: ``curl -H "Authorization: Bearer <credential:K>"``.
    """
    missing = [n for n in dict.fromkeys(PLACEHOLDER.findall(command)) if n not in credentials]
    if missing:
        raise UnknownCredential(missing)
    return PLACEHOLDER.sub(lambda m: "${" + m.group(1) + "}", command)
