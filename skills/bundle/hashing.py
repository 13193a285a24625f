"""The content hash that binds an approval to exact skill content.

Definition (ARCHITECTURE.md "Content hash", made byte-exact here)::

    files   = every (path, bytes) of the skill except the top-level "policy.json"
    path    = the relative POSIX path, NFC-normalised, encoded as UTF-8
    order   = ascending by the UTF-8 bytes of path
    digest  = SHA-256 over the concatenation, for each file in order, of
                  path  0x00  decimal(len(bytes)) as ASCII  0x00  bytes
    result  = "sha256:" + lowercase hex(digest)

Paths cannot contain NUL (control characters are refused), and the explicit length makes the
boundary between one file's bytes and the next path unambiguous, so two different file sets
never produce the same input stream. Nothing machine-specific (timestamps, modes, owners,
filesystem order, Unicode normalisation form) enters the hash.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable

from .types import POLICY_FILE

HASH_PREFIX = "sha256:"


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def content_hash(files: Iterable[tuple[str, bytes]]) -> str:
    """Hash a skill's files as defined in the module docstring (order-independent).

    Raises ``ValueError`` if two entries share a path (after NFC), since the hash of such a set
    would depend on which copy a reader keeps.
    """
    entries: dict[bytes, bytes] = {}
    for path, data in files:
        normalised = unicodedata.normalize("NFC", path)
        if normalised == POLICY_FILE:
            continue
        key = normalised.encode("utf-8")
        if key in entries:
            raise ValueError(f"duplicate path in content hash input: {normalised!r}")
        entries[key] = bytes(data)
    digest = hashlib.sha256()
    for key in sorted(entries):
        data = entries[key]
        digest.update(key)
        digest.update(b"\0")
        digest.update(str(len(data)).encode("ascii"))
        digest.update(b"\0")
        digest.update(data)
    return HASH_PREFIX + digest.hexdigest()
