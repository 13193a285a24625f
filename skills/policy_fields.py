"""Checking a policy's field values, wherever they come from: an edit, an approval, or the
proposal in a bundle's policy.json. A refused value raises `PolicyValidationError` naming the
field and the rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sandbox import egress
from skills import bundle as bundle_lib
from skills.errors import PolicyValidationError
from skills.toolpolicy import manifests
from skills.toolpolicy.dependencies import DependencyInvalid, parse_dependency
from skills.toolpolicy.inputs import schema_problem
from skills.toolpolicy.shell import allowlist_problems

# Tools a policy may grant: every tool with a manifest and the aliases (skills.toolpolicy).
KNOWN_TOOLS = frozenset(manifests.GRANTABLE)


def _policy_proposal(bundle: bundle_lib.Bundle) -> dict[str, Any]:
    """Policy fields proposed by a bundle's policy.json (never an approval), validated."""
    raw = bundle.declared_policy or {}
    if not isinstance(raw, Mapping):
        return {}
    proposal: dict[str, Any] = {}
    for source_key, target in (
        ("allowedDomains", "allowed_domains"),
        ("allowed_domains", "allowed_domains"),
        ("domains", "allowed_domains"),
        ("requiredCredentials", "required_credentials"),
        ("required_credentials", "required_credentials"),
        ("tools", "tools"),
        ("dependencies", "dependencies"),
        ("inputs", "inputs"),
    ):
        if source_key in raw and target not in proposal:
            proposal[target] = raw[source_key]
    return _validated_policy_fields(proposal, source="policy.json")


def _bundle_provenance(bundle: bundle_lib.Bundle) -> dict[str, Any]:
    raw = bundle.declared_policy or {}
    prov = raw.get("provenance") if isinstance(raw, Mapping) else None
    if not isinstance(prov, Mapping):
        return {}
    out: dict[str, Any] = {}
    source = prov.get("source")
    fetched = prov.get("fetchedAt", prov.get("fetched_at"))
    if isinstance(source, str) and source:
        out["source"] = source[:2000]
    if isinstance(fetched, str) and fetched:
        out["fetched_at"] = fetched[:64]
    return out


def _checked_domains(domains: list[str], *, source: str) -> list[str]:
    """The entries in canonical form (`host`, `*.domain`, either with `:port`), parsed by the
    egress policy's own parser, so a saved policy never holds an entry a run's sandbox would
    refuse. Raises PolicyValidationError naming the entry and the egress rule."""
    try:
        parsed = egress.validate_domains(domains)
    except egress.PolicyError as exc:
        raise PolicyValidationError(
            f"{source}: allowed_domains entry {exc.entry!r} is refused by the egress policy: "
            f"{exc} (rule: {exc.rule}). Write a host (api.example.org), a wildcard "
            "(*.example.org) or either with a port (api.example.org:8443).",
            details={
                "field": "allowed_domains",
                "rule": "hostname",
                "egress_rule": exc.rule,
                "value": exc.entry,
            },
        ) from None
    out: list[str] = []
    for entry in parsed:
        if str(entry) not in out:
            out.append(str(entry))
    return out


_CREDENTIAL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


def _is_credential_name(name: object) -> bool:
    """1-100 ASCII letters, digits and underscores, not starting with a digit (an env name)."""
    return isinstance(name, str) and _CREDENTIAL_NAME_RE.fullmatch(name) is not None


def _string_list(field_name: str, value: Any, *, source: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise PolicyValidationError(
            f"{source}: {field_name} must be a list of strings.",
            details={"field": field_name, "rule": "list_of_strings"},
        )
    where = bundle_lib.unstorable_text(list(value))
    if where is not None:
        raise PolicyValidationError(
            f"{source}: {field_name} {where.removeprefix('field ')} holds a NUL or an unpaired "
            "surrogate character.",
            details={"field": field_name, "rule": "storable_text"},
        )
    out: list[str] = []
    for item in value:
        if item not in out:
            out.append(item)
    return out


def _validated_policy_fields(fields: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """Check policy field values; raise `PolicyValidationError` naming field and rule."""
    out: dict[str, Any] = {}
    if "allowed_domains" in fields:
        domains = _string_list("allowed_domains", fields["allowed_domains"], source=source)
        out["allowed_domains"] = _checked_domains(domains, source=source)
    if "required_credentials" in fields:
        names = _string_list("required_credentials", fields["required_credentials"], source=source)
        bad = [n for n in names if not _is_credential_name(n)]
        if bad:
            raise PolicyValidationError(
                f"{source}: required_credentials contains {bad[0]!r}; names are 1-100 "
                "ASCII letters, digits and underscores, not starting with a digit.",
                details={
                    "field": "required_credentials",
                    "rule": "credential_name",
                    "value": bad[0],
                },
            )
        out["required_credentials"] = names
    if "tools" in fields:
        tools = _string_list("tools", fields["tools"], source=source)
        bad = [t for t in tools if t not in KNOWN_TOOLS]
        if bad:
            raise PolicyValidationError(
                f"{source}: tools contains unknown tool {bad[0]!r}; grantable tools are "
                f"{', '.join(manifests.GRANTABLE)}.",
                details={"field": "tools", "rule": "known_tool", "value": bad[0]},
            )
        out["tools"] = tools
    if "dependencies" in fields:
        dependencies = _string_list("dependencies", fields["dependencies"], source=source)
        for entry in dependencies:
            try:
                parse_dependency(entry)
            except DependencyInvalid as exc:
                raise PolicyValidationError(
                    f"{source}: {exc}.",
                    details={"field": "dependencies", "rule": exc.rule, "value": entry[:200]},
                ) from None
        out["dependencies"] = dependencies
    if "shell_allowlist" in fields:
        names = _string_list("shell_allowlist", fields["shell_allowlist"], source=source)
        problems = allowlist_problems(names)
        if problems:
            raise PolicyValidationError(
                f"{source}: shell_allowlist: {problems[0]}.",
                details={
                    "field": "shell_allowlist",
                    "rule": "sandbox_program",
                    "problems": problems,
                },
            )
        out["shell_allowlist"] = names
    if "inputs" in fields:
        inputs = fields["inputs"]
        if not isinstance(inputs, Mapping) or (inputs and inputs.get("type", "object") != "object"):
            raise PolicyValidationError(
                f"{source}: inputs must be a JSON schema object ({{'type': 'object', ...}}).",
                details={"field": "inputs", "rule": "json_schema_object"},
            )
        problem = schema_problem(inputs)
        if problem is not None:
            raise PolicyValidationError(
                f"{source}: inputs is {problem}.",
                details={"field": "inputs", "rule": "json_schema"},
            )
        where = bundle_lib.unstorable_text(dict(inputs))
        if where is not None:
            raise PolicyValidationError(
                f"{source}: inputs {where} holds a NUL or an unpaired surrogate character.",
                details={"field": "inputs", "rule": "storable_text"},
            )
        out["inputs"] = dict(inputs)
    return out
