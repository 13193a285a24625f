"""A skill's declared dependencies, as a policy stores them: exact pins, plain names only.

    pip:requests==2.32.3        a PyPI distribution at one version
    requests==2.32.3            the same (pip is the default ecosystem)
    npm:left-pad@1.3.0          an npm package (scoped names allowed) at one version

Anything else — a URL, a path, an unpinned or ranged version, a name with shell metacharacters
— is refused when the policy is saved, naming the entry and the rule, so an installer is only
ever handed a name and a version it resolves against the configured package index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PIP_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
_PIP_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc|\.post|\.dev)[0-9]+)*")
_NPM_NAME = re.compile(r"(?:@[a-z0-9][a-z0-9._-]{0,100}/)?[a-z0-9][a-z0-9._-]{0,100}")
_NPM_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]{1,64})?")

ECOSYSTEMS = ("pip", "npm")


@dataclass(frozen=True, slots=True)
class Dependency:
    ecosystem: str
    name: str
    version: str

    def spec(self) -> str:
        """The installer's argument: name==version (pip) or name@version (npm)."""
        sep = "==" if self.ecosystem == "pip" else "@"
        return f"{self.name}{sep}{self.version}"


class DependencyInvalid(ValueError):
    """An entry that is not a pinned plain package name; `rule` says which rule it broke."""

    def __init__(self, entry: str, rule: str, message: str) -> None:
        super().__init__(message)
        self.entry = entry
        self.rule = rule


def parse_dependency(entry: str) -> Dependency:
    """The dependency `entry` declares; DependencyInvalid naming the entry and the rule."""
    shown = repr(entry[:120])
    if "://" in entry:
        raise DependencyInvalid(
            entry, "plain_name", f"dependency {shown} is a URL; name a package and a version"
        )
    ecosystem, _, rest = entry.partition(":") if ":" in entry else ("pip", "", entry)
    if ecosystem not in ECOSYSTEMS:
        raise DependencyInvalid(
            entry, "ecosystem", f"dependency {shown}: {ecosystem!r} is not one of pip, npm"
        )
    if ecosystem == "pip":
        name, sep, version = rest.partition("==")
        name_rule, version_rule, pin = _PIP_NAME, _PIP_VERSION, "name==version"
    else:
        at = rest.rfind("@")
        name, sep, version = (rest[:at], "@", rest[at + 1 :]) if at > 0 else (rest, "", "")
        name_rule, version_rule, pin = _NPM_NAME, _NPM_VERSION, "name@version"
    if not name_rule.fullmatch(name):
        raise DependencyInvalid(
            entry,
            "plain_name",
            f"dependency {shown}: {name[:120]!r} is not a plain {ecosystem} package name "
            "(no URLs, paths, spaces or shell characters)",
        )
    if not sep or not version_rule.fullmatch(version):
        raise DependencyInvalid(
            entry,
            "pinned_version",
            f"dependency {shown} must pin one exact version ({ecosystem}:{pin})",
        )
    return Dependency(ecosystem=ecosystem, name=name, version=version)
