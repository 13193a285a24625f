"""State changes of the skills app: installation, extraction, review, approval, rollback, edits.

Every state-changing function is keyword-only, takes an `actor` and runs inside
`transaction.atomic()`: it locks the rows it changes (always the `Skill` row before any `Policy`
row, so two services never wait on each other in opposite order), calls a django-fsm transition,
saves and writes a `PolicyAuditEvent` in the same transaction. A refused operation raises a
`skills.errors` error and leaves the database as it was.

Decisions worth knowing:
- Policies are per (skill, agent). Installing content *with* an agent creates or resets that
  agent's policy to pending_review; installing *without* an agent (`import_skills` without
  `--agent`, `load_example_skills` without `--agent`) creates no policy. An agent that later loads
  the skill gets a needs_reapproval policy (seed 000 Scenario 5 / onboarding).
- New content only resets the policy of the agent whose run or import produced it. Other agents'
  approved policies keep their `approved_content_hash`; loading the skill for them then finds the
  mismatch and moves them to needs_reapproval ("previously approved, something changed").
- A policy.json inside a bundle is never content and never an approval. On import its
  allowed domains, credentials names, tools, dependencies and inputs become the *proposal* of a
  policy created by that import (still pending_review, shown in the review); extraction takes
  only its provenance (seed 000: new skills get no domains from the run that created them).
- Pending credentials of a run (seed 001 `save_credential`): for a policy created by the
  extraction every pending name is merged and added to required_credentials (first-time
  creation); for an existing policy only names already in required_credentials are merged, the
  others are dropped and named in the log (never their values).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import Max, Model
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from sandbox import egress
from skills import bundle as bundle_lib
from skills.crypto import decrypt_json, encrypt_json
from skills.errors import (
    ApprovalPermissionDenied,
    PolicyNotFound,
    PolicyTransitionNotAllowed,
    PolicyValidationError,
    SkillError,
    SkillHashMismatch,
    SkillNotFound,
    SkillSourceConflict,
    SkillValidationError,
    SkillVersionNotFound,
    StaleReview,
)
from skills.models import (
    LOCAL_SOURCE,
    AuditAction,
    Policy,
    PolicyAuditEvent,
    PolicyStatus,
    Skill,
    SkillFile,
    SkillVersion,
)

logger = logging.getLogger(__name__)

APPROVE_PERMISSION = "skills.approve_policy"
REDACTED = "[set]"

# Tools a policy may grant (ARCHITECTURE.md "Core contracts"), including the aliases.
KNOWN_TOOLS = frozenset(
    {
        "code",
        "bash",
        "read",
        "write",
        "edit",
        "list",
        "glob",
        "grep",
        "fetch",
        "browser",
        "filesystem",
        "shell",
        "ask_user",
        "save_credential",
        "request_approval",
    }
)


# --- actors ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    """Who performs a change: a user (or None for the system) and a label for the audit trail.

    Labels read like "admin:alice", "run 42", "import", "system".
    """

    user: AbstractBaseUser | None
    label: str

    @classmethod
    def from_user(cls, user: AbstractBaseUser | AnonymousUser, *, prefix: str = "admin") -> Actor:
        if not getattr(user, "is_authenticated", False):
            return cls(user=None, label="anonymous")
        return cls(user=user, label=f"{prefix}:{user.get_username()}")  # type: ignore[arg-type]

    @classmethod
    def system(cls, label: str = "system") -> Actor:
        return cls(user=None, label=label)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallResult:
    """Outcome of installing one bundle."""

    skill: Skill
    version: SkillVersion
    skill_created: bool
    version_created: bool
    policy: Policy | None


class ExtractionFailure(TypedDict):
    name: str
    reason: str


class ExtractionResult(TypedDict):
    created: list[str]
    updated: list[str]
    unchanged: list[str]
    failed: list[ExtractionFailure]


@dataclass(frozen=True)
class LoadedFile:
    path: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class LoadedSkill:
    """What a run needs from a skill: its verified files, instructions and policy.

    Holds no credential values; resolve them with `skills.selectors.policy_credential_values`
    when the sandbox is started.
    """

    skill: Skill
    version: SkillVersion
    policy: Policy
    files: tuple[LoadedFile, ...]
    instructions: str
    content_hash: str

    @property
    def approved(self) -> bool:
        """Whether the policy's defaults (tools, domains, credentials) may be used implicitly."""
        return self.policy.status == PolicyStatus.APPROVED


# --- helpers ---------------------------------------------------------------------------------


def _agent_name(agent: Model | None) -> str:
    return str(getattr(agent, "name", "")) if agent is not None else ""


def _audit(
    *,
    action: str,
    actor: Actor,
    skill: Skill | None = None,
    skill_name: str = "",
    policy: Policy | None = None,
    agent: Model | None = None,
    from_status: str = "",
    to_status: str = "",
    reason: str = "",
    content_hash: str = "",
    version_number: int | None = None,
    changes: Mapping[str, Any] | None = None,
) -> PolicyAuditEvent:
    if policy is not None:
        skill = skill or policy.skill
        agent = agent or policy.agent
    return PolicyAuditEvent.objects.create(
        policy=policy,
        skill=skill,
        skill_name=skill_name or (skill.name if skill is not None else ""),
        agent=agent,
        agent_ref_id=agent.pk if agent is not None else None,
        agent_name=_agent_name(agent),
        actor=actor.user,
        actor_label=actor.label[:200],
        action=action,
        from_status=from_status,
        to_status=to_status,
        reason=reason,
        content_hash=content_hash,
        version_number=version_number,
        changes=dict(changes or {}),
    )


def _apply(policy: Policy, action: str, method: Any, /, **kwargs: Any) -> tuple[str, str]:
    """Run a transition; turn django-fsm's refusal into a domain error. Returns (from, to)."""
    before = policy.status
    try:
        method(**kwargs)
    except TransitionNotAllowed as exc:
        raise PolicyTransitionNotAllowed(
            f"Cannot {action} policy of skill {policy.skill.name!r} for agent "
            f"{_agent_name(policy.agent)!r}: status is {before!r}.",
            details={"action": action, "status": before},
        ) from exc
    return before, policy.status


def _lock_skill(*, skill_id: int | None = None, name: str | None = None) -> Skill:
    qs = Skill.objects.select_for_update(of=("self",))
    try:
        if skill_id is not None:
            return qs.get(pk=skill_id)
        return qs.get(name=name)
    except Skill.DoesNotExist:
        raise SkillNotFound(
            f"No skill named {name!r}." if name else f"No skill with id {skill_id}.",
            details={"name": name} if name else {"id": skill_id},
        ) from None


def _lock_policy(*, policy_id: int) -> Policy:
    try:
        return (
            Policy.objects.select_for_update(of=("self",))
            .select_related("skill", "agent")
            .get(pk=policy_id)
        )
    except Policy.DoesNotExist:
        raise PolicyNotFound(f"No policy with id {policy_id}.", details={"id": policy_id}) from None


def _lock_skill_and_policy(policy: Policy | int) -> tuple[Skill, Policy]:
    policy_id = policy if isinstance(policy, int) else policy.pk
    # Skill first (lock order), found through an unlocked read of the policy.
    skill_id = Policy.objects.filter(pk=policy_id).values_list("skill_id", flat=True).first()
    if skill_id is None:
        raise PolicyNotFound(f"No policy with id {policy_id}.", details={"id": policy_id})
    skill = _lock_skill(skill_id=skill_id)
    return skill, _lock_policy(policy_id=policy_id)


def _get_or_create_locked_skill(name: str, description: str, source: str) -> tuple[Skill, bool]:
    """The Skill row for `name`, locked, created from `source` when missing (race-safe on the
    unique name)."""
    created = False
    if not Skill.objects.filter(name=name).exists():
        try:
            with transaction.atomic():
                Skill.objects.create(name=name, description=description, source=source)
                created = True
        except IntegrityError:
            # Another transaction created it first; its row is committed now.
            created = False
    return _lock_skill(name=name), created


def _get_or_create_locked_policy(
    skill: Skill, agent: Model, *, status: str = PolicyStatus.PENDING_REVIEW, **defaults: Any
) -> tuple[Policy, bool]:
    created = False
    if not Policy.objects.filter(skill=skill, agent=agent).exists():
        try:
            with transaction.atomic():
                Policy.objects.create(skill=skill, agent=agent, status=status, **defaults)
                created = True
        except IntegrityError:
            created = False
    policy = (
        Policy.objects.select_for_update(of=("self",))
        .select_related("skill", "agent")
        .get(skill=skill, agent=agent)
    )
    return policy, created


def _version_files(version: SkillVersion) -> list[SkillFile]:
    return list(SkillFile.objects.filter(version=version).order_by("path"))


def _recompute_hash(files: Iterable[SkillFile]) -> str:
    return bundle_lib.content_hash((f.path, bytes(f.data)) for f in files)


def _limits() -> bundle_lib.BundleLimits:
    return bundle_lib.BundleLimits(
        max_file_bytes=settings.MOTOR_SKILL_MAX_FILE_BYTES,
        max_total_bytes=settings.MOTOR_SKILL_MAX_TOTAL_BYTES,
        max_archive_entries=settings.MOTOR_SKILL_MAX_ARCHIVE_ENTRIES,
        max_compression_ratio=settings.MOTOR_SKILL_MAX_COMPRESSION_RATIO,
    )


def _has_approve_permission(actor: Actor) -> bool:
    user = actor.user
    return bool(
        user is not None
        and getattr(user, "is_active", False)
        and getattr(user, "is_staff", False)
        and user.has_perm(APPROVE_PERMISSION)  # type: ignore[attr-defined]
    )


def _require_approver(actor: Actor, *, what: str) -> None:
    if not _has_approve_permission(actor):
        raise ApprovalPermissionDenied(
            f"{actor.label} may not {what}: approval needs an active staff user with the "
            f"'{APPROVE_PERMISSION}' permission.",
            details={"actor": actor.label, "permission": APPROVE_PERMISSION},
        )


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


def _require_storable(field_name: str, text: str) -> None:
    """Refuse free text (notes, reasons) that a PostgreSQL text column cannot hold."""
    if bundle_lib.unstorable_text(text) is not None:
        raise PolicyValidationError(
            f"{field_name} holds a NUL or an unpaired surrogate character.",
            details={"field": field_name, "rule": "storable_text"},
        )


def _storable(label: str) -> str:
    """`label` with NUL and lone surrogates (a non-UTF-8 file name, a hostile upload name)
    escaped, so that it fits a PostgreSQL text or JSON value."""
    return label.encode("utf-8", "backslashreplace").decode("utf-8").replace("\0", "\\x00")[:2000]


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
                f"{source}: tools contains unknown tool {bad[0]!r}; known tools are "
                f"{', '.join(sorted(KNOWN_TOOLS))}.",
                details={"field": "tools", "rule": "known_tool", "value": bad[0]},
            )
        out["tools"] = tools
    if "dependencies" in fields:
        out["dependencies"] = _string_list("dependencies", fields["dependencies"], source=source)
    if "inputs" in fields:
        inputs = fields["inputs"]
        if not isinstance(inputs, Mapping) or (inputs and inputs.get("type", "object") != "object"):
            raise PolicyValidationError(
                f"{source}: inputs must be a JSON schema object ({{'type': 'object', ...}}).",
                details={"field": "inputs", "rule": "json_schema_object"},
            )
        where = bundle_lib.unstorable_text(dict(inputs))
        if where is not None:
            raise PolicyValidationError(
                f"{source}: inputs {where} holds a NUL or an unpaired surrogate character.",
                details={"field": "inputs", "rule": "storable_text"},
            )
        out["inputs"] = dict(inputs)
    return out


def _merge_pending_credentials(
    policy: Policy, pending: Mapping[str, str], *, policy_is_new: bool
) -> dict[str, Any]:
    """Merge a run's pending credentials into `policy` (in memory); return the audit change."""
    if not pending:
        return {}
    values = decrypt_json(policy.credential_values)
    required = list(policy.required_credentials)
    merged: list[str] = []
    dropped: list[str] = []
    for name, value in sorted(pending.items()):
        if not isinstance(value, str) or not value or not _is_credential_name(name):
            dropped.append(name)
            continue
        if policy_is_new and name not in required:
            required.append(name)
        if name in required:
            values[name] = value
            merged.append(name)
        else:
            dropped.append(name)
    if dropped:
        logger.warning(
            "skill %s: pending credentials %s are not in required_credentials; not stored",
            policy.skill.name,
            ", ".join(dropped),
        )
    if not merged:
        return {}
    policy.required_credentials = required
    policy.credential_values = encrypt_json(values)
    return {
        "credential_values": {"set": dict.fromkeys(merged, REDACTED)},
        "required_credentials": required,
    }


# --- installation ----------------------------------------------------------------------------


def _install_locked(
    *,
    bundle: bundle_lib.Bundle,
    actor: Actor,
    agent: Model | None,
    provenance: Mapping[str, Any] | None,
    extracted_from: Mapping[str, Any] | None,
    pending_credentials: Mapping[str, str] | None,
    apply_proposal: bool,
    source: str | None = None,
) -> InstallResult:
    """Install one validated bundle. Must run inside transaction.atomic().

    With a `source` (imports), new content for an existing skill of that name must come from
    the same source, else `SkillSourceConflict` (content identical to the current version is
    the same skill wherever it comes from: nothing changes). Without one (extraction: a run
    changing the skill it was given; direct installs) the skill keeps its source and a new
    skill is "local".
    """
    proposal = _policy_proposal(bundle) if apply_proposal else {}
    skill, skill_created = _get_or_create_locked_skill(
        bundle.name, bundle.description, source if source is not None else LOCAL_SOURCE
    )
    current = skill.current_version
    digest = bundle.content_hash
    version_created = current is None or current.content_hash != digest
    if version_created and not skill_created and source is not None and skill.source != source:
        installed_from = skill.source or "an unrecorded source"
        raise SkillSourceConflict(
            f"A skill named {bundle.name!r} is already installed from {installed_from}; this "
            f"one comes from {source}. Install it under another name, or import it from the "
            "same source to make a new version.",
            details={
                "rule": "skill-source-conflict",
                "name": bundle.name,
                "installed_source": skill.source,
                "source": source,
            },
        )
    if version_created:
        # Allocated under the Skill row lock: concurrent installs get consecutive numbers.
        last = SkillVersion.objects.filter(skill=skill).aggregate(n=Max("number"))["n"] or 0
        version = SkillVersion.objects.create(
            skill=skill,
            number=last + 1,
            content_hash=digest,
            description=bundle.description,
            frontmatter=dict(bundle.frontmatter),
            provenance=dict(provenance or _bundle_provenance(bundle)),
            extracted_from=dict(extracted_from or {}),
            created_by=actor.user,
            created_by_label=actor.label[:200],
            parent=current,
        )
        SkillFile.objects.bulk_create(
            SkillFile(version=version, path=f.path, size=len(f.data), sha256=f.sha256, data=f.data)
            for f in bundle.files
        )
        skill.current_version = version
        skill.description = bundle.description
        skill.save(update_fields=["current_version", "description", "updated_at"])
        _audit(
            action=AuditAction.SKILL_INSTALLED,
            actor=actor,
            skill=skill,
            agent=agent,
            reason="new skill" if skill_created else "new version",
            content_hash=digest,
            version_number=version.number,
            changes={
                "files": [f.path for f in bundle.files],
                **({"source": skill.source} if skill_created else {}),
                **({"extracted_from": dict(extracted_from)} if extracted_from else {}),
            },
        )
    else:
        assert current is not None
        version = current

    policy: Policy | None = None
    if agent is not None:
        policy, policy_created = _get_or_create_locked_policy(skill, agent, **proposal)
        if policy_created:
            _audit(
                action=AuditAction.POLICY_CREATED,
                actor=actor,
                policy=policy,
                to_status=policy.status,
                content_hash=digest,
                version_number=version.number,
                changes={k: v for k, v in proposal.items()},
            )
        elif version_created:
            before, after = _apply(policy, "reset", policy.content_changed)
            policy.save()
            _audit(
                action=AuditAction.CONTENT_CHANGED,
                actor=actor,
                policy=policy,
                from_status=before,
                to_status=after,
                reason="content changed",
                content_hash=digest,
                version_number=version.number,
            )
        cred_change = _merge_pending_credentials(
            policy, pending_credentials or {}, policy_is_new=policy_created
        )
        if cred_change:
            policy.save()
            _audit(
                action=AuditAction.POLICY_UPDATED,
                actor=actor,
                policy=policy,
                from_status=policy.status,
                to_status=policy.status,
                reason="pending credentials from run",
                content_hash=digest,
                version_number=version.number,
                changes=cred_change,
            )
    return InstallResult(
        skill=skill,
        version=version,
        skill_created=skill_created,
        version_created=version_created,
        policy=policy,
    )


def skill_install_bundle(
    *,
    bundle: bundle_lib.Bundle,
    actor: Actor,
    agent: Model | None = None,
    provenance: Mapping[str, Any] | None = None,
    extracted_from: Mapping[str, Any] | None = None,
    pending_credentials: Mapping[str, str] | None = None,
) -> InstallResult:
    """Install a validated bundle as a new skill or a new version of an existing one.

    Identical content (same hash as the current version) creates no version and leaves every
    status as it is. New content becomes the current version (number allocated under the Skill
    row lock); `agent`'s policy is created or reset to pending_review. The skill's source is not
    checked (imports go through `skills.imports`, which does); a new skill's source is "local".
    """
    with transaction.atomic():
        return _install_locked(
            bundle=bundle,
            actor=actor,
            agent=agent,
            provenance=provenance,
            extracted_from=extracted_from,
            pending_credentials=pending_credentials,
            apply_proposal=False,
        )


def _bundle_error(exc: bundle_lib.BundleError, what: str) -> SkillValidationError:
    return SkillValidationError(f"{what} was refused:", problems=exc.problems)


# --- workspaces ------------------------------------------------------------------------------


_DIR_OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_CREATE_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
)


def _write_inside(root_fd: int, relative: str, data: bytes) -> None:
    """Create `relative` below the directory `root_fd` without following any link.

    Each component is opened relative to its parent with O_NOFOLLOW, so a symlink left in a
    reused workspace (`scripts -> /etc`) makes the write fail instead of escaping.
    """
    parts = relative.split("/")
    dir_fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=dir_fd)
            except FileExistsError:
                pass
            next_fd = os.open(part, _DIR_OPEN_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
        fd = os.open(parts[-1], _FILE_CREATE_FLAGS, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    finally:
        os.close(dir_fd)


def skill_prepare_workspace(*, version: SkillVersion, workspace: Path) -> list[str]:
    """Write `version`'s files at the workspace root and the baseline the extraction diffs against.

    The stored bytes are re-hashed first (`SkillHashMismatch` when they do not match the
    version). Files are written without following links; a path that is refused or a link in
    the way raises `SkillValidationError`. Returns the relative paths written; changes no
    database row.
    """
    workspace = Path(workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    files = _version_files(version)
    computed = _recompute_hash(files)
    if computed != version.content_hash:
        raise SkillHashMismatch(
            f"Skill {version.skill.name!r} v{version.number}: stored files hash to {computed}, "
            f"not the recorded {version.content_hash}; refusing to prepare a workspace with it.",
            details={"expected": version.content_hash, "actual": computed},
        )
    try:
        root_fd = os.open(workspace, _DIR_OPEN_FLAGS)
    except OSError as exc:
        raise SkillValidationError(
            f"Workspace {workspace} cannot be opened as a plain directory ({exc.strerror}).",
            details={"rule": "workspace", "path": str(workspace)},
        ) from exc
    try:
        for f in files:
            path, problems = bundle_lib.check_path(f.path)
            if problems or path != f.path:
                raise SkillValidationError(
                    f"Stored file path {f.path!r} is not a safe relative path.",
                    problems=problems,
                    details={"rule": "path", "path": f.path},
                )
            try:
                _write_inside(root_fd, f.path, bytes(f.data))
            except OSError as exc:
                raise SkillValidationError(
                    f"Cannot write {f.path} into workspace {workspace}: {exc.strerror} "
                    "(a link or a non-directory is in the way).",
                    details={"rule": "workspace-write", "path": f.path},
                ) from exc
    finally:
        os.close(root_fd)
    bundle_lib.write_baseline(
        workspace, ((f.path, bytes(f.data)) for f in files), skill_name=version.skill.name
    )
    return [f.path for f in files]


def skills_extract_from_workspace(
    *,
    workspace: Path,
    run_id: str | int,
    agent: Model | None,
    pending_credentials: Mapping[str, str] | None = None,
    actor: Actor | None = None,
) -> ExtractionResult:
    """Install the skills a run created or changed in `workspace` (seed 000 "Post-Run Extraction").

    Skill directories are the workspace root (when it holds a SKILL.md), `skills/<name>/` and
    `<name>/` (see `skills.bundle.find_skill_dirs`). Each is diffed against the baseline written
    by `skill_prepare_workspace` (missing baseline: every file is new). A skill without changes
    creates no version and keeps its status (a run's pending credentials are still stored for
    it as a policy-only edit). A changed skill is validated and installed in its own transaction,
    so one invalid skill never blocks the others; it is listed in `failed` with the reason.
    Nothing in the workspace is executed or modified.
    """
    workspace = Path(workspace)
    if workspace.is_symlink() or not workspace.is_dir():
        raise SkillValidationError(
            f"Workspace {workspace} is not a directory.",
            details={"rule": "workspace", "path": str(workspace)},
        )
    actor = actor or Actor.system(f"run {run_id}")
    limits = _limits()
    result: ExtractionResult = {"created": [], "updated": [], "unchanged": [], "failed": []}
    baseline = bundle_lib.read_baseline(workspace)
    timestamp = timezone.now().isoformat()
    for skill_dir in bundle_lib.find_skill_dirs(workspace):
        at_root = skill_dir == workspace
        prefix = "" if at_root else skill_dir.relative_to(workspace).as_posix() + "/"
        if at_root:
            label = (baseline.skill_name if baseline else None) or "."
        else:
            label = skill_dir.name
        try:
            current = bundle_lib.scan_skill_dir(skill_dir, limits=limits)
        except bundle_lib.BundleError as exc:
            result["failed"].append({"name": label, "reason": _bundle_error(exc, label).message})
            continue
        diff = bundle_lib.diff_against_baseline(current, baseline, prefix=prefix)
        if not diff.has_changes:
            if pending_credentials and agent is not None:
                _merge_credentials_unchanged(label, agent, pending_credentials, actor)
            result["unchanged"].append(label)
            continue
        try:
            # The workspace root is named after the run, not the skill: only subdirectories
            # must match the skill's name.
            bundle = bundle_lib.bundle_from_directory(
                skill_dir, limits=limits, check_dir_name=not at_root
            )
        except bundle_lib.BundleError as exc:
            result["failed"].append({"name": label, "reason": _bundle_error(exc, label).message})
            continue
        # Diff again on exactly the bytes being installed (the directory was read twice).
        diff = bundle_lib.diff_against_baseline(bundle.file_map(), baseline, prefix=prefix)
        extracted_from = {
            "run_id": str(run_id),
            "timestamp": timestamp,
            "changed_files": sorted(diff.changed + diff.added),
            "deleted_files": sorted(diff.deleted),
        }
        try:
            with transaction.atomic():
                installed = _install_locked(
                    bundle=bundle,
                    actor=actor,
                    agent=agent,
                    provenance=_bundle_provenance(bundle),
                    extracted_from=extracted_from,
                    pending_credentials=pending_credentials,
                    apply_proposal=False,
                )
        except SkillError as exc:
            result["failed"].append({"name": bundle.name, "reason": exc.message})
            continue
        if installed.skill_created:
            result["created"].append(bundle.name)
        elif installed.version_created:
            result["updated"].append(bundle.name)
        else:
            result["unchanged"].append(bundle.name)
    # Directory names come from the run's workspace and may not be UTF-8; the result is stored
    # as JSON by the caller, which cannot hold lone surrogates.
    return {
        "created": result["created"],
        "updated": result["updated"],
        "unchanged": [_storable(name) for name in result["unchanged"]],
        "failed": [
            {"name": _storable(f["name"]), "reason": _storable(f["reason"])}
            for f in result["failed"]
        ],
    }


def _merge_credentials_unchanged(
    name: str, agent: Model, pending: Mapping[str, str], actor: Actor
) -> None:
    """Store a run's credentials for a skill whose files did not change (policy-only edit)."""
    with transaction.atomic():
        try:
            skill = _lock_skill(name=name)
        except SkillNotFound:
            return
        policy = (
            Policy.objects.select_for_update(of=("self",))
            .select_related("skill", "agent")
            .filter(skill=skill, agent=agent)
            .first()
        )
        if policy is None:
            return
        change = _merge_pending_credentials(policy, pending, policy_is_new=False)
        if change:
            policy.save()
            version = skill.current_version
            _audit(
                action=AuditAction.POLICY_UPDATED,
                actor=actor,
                policy=policy,
                from_status=policy.status,
                to_status=policy.status,
                reason="pending credentials from run",
                content_hash=version.content_hash if version else "",
                version_number=version.number if version else None,
                changes=change,
            )


# --- loading for execution -------------------------------------------------------------------


def skill_load_for_execution(
    *, name: str, agent: Model, actor: Actor | None = None, allow_disabled: bool = False
) -> LoadedSkill:
    """The current version of skill `name` for `agent`, after recomputing its hash.

    - A skill that staff disabled for `agent` raises SkillDisabled (naming both), unless
      `allow_disabled` (a review run only reads it).

    - The hash is recomputed from the stored bytes. If it differs from the version's recorded
      hash, or (for an approved policy) from `approved_content_hash`, an approved policy moves to
      needs_reapproval — committed before `SkillHashMismatch` is raised.
    - An agent without a policy gets one in needs_reapproval (onboarding, seed 000 Scenario 5).
    - A policy that is not approved is returned as it is; `LoadedSkill.approved` tells the caller
      whether the policy defaults may be used.

    Call it outside any transaction of your own: the demotion is committed by this function's
    own block before the error is raised, but an enclosing transaction that is rolled back
    because of the error would undo it.
    """
    actor = actor or Actor.system("load")
    mismatch: SkillHashMismatch | None = None
    # This block commits on its own (a savepoint when nested) *before* the error is raised,
    # so the demotion to needs_reapproval is not rolled back by the refusal.
    with transaction.atomic():
        skill = _lock_skill(name=name)
        version = skill.current_version
        if version is None:
            raise SkillNotFound(f"Skill {name!r} has no installed version.", details={"name": name})
        policy, created = _get_or_create_locked_policy(
            skill, agent, status=PolicyStatus.NEEDS_REAPPROVAL
        )
        if created:
            _audit(
                action=AuditAction.POLICY_CREATED,
                actor=actor,
                policy=policy,
                to_status=policy.status,
                reason="no policy for this agent",
                content_hash=version.content_hash,
                version_number=version.number,
            )
        files = _version_files(version)
        computed = _recompute_hash(files)
        expected = version.content_hash
        if policy.status == PolicyStatus.APPROVED and policy.approved_content_hash != computed:
            expected = policy.approved_content_hash
        if computed != expected:
            mismatch = SkillHashMismatch(
                f"Skill {name!r} v{version.number}: its files hash to {computed}, but "
                f"{expected} was {'approved' if expected != version.content_hash else 'recorded'}; "
                "it needs re-approval before it runs with its policy.",
                details={"name": name, "expected": expected, "actual": computed},
            )
            if policy.status == PolicyStatus.APPROVED:
                before, after = _apply(policy, "mark mismatch", policy.hash_mismatch)
                policy.save()
                _audit(
                    action=AuditAction.HASH_MISMATCH,
                    actor=actor,
                    policy=policy,
                    from_status=before,
                    to_status=after,
                    reason=f"expected {expected}, found {computed}",
                    content_hash=computed,
                    version_number=version.number,
                )
    if policy.disabled_at is not None and not allow_disabled:
        from skills.disabling import disabled_error

        raise disabled_error(policy)
    if mismatch is not None:
        raise mismatch
    loaded_files = tuple(LoadedFile(path=f.path, data=bytes(f.data)) for f in files)
    skill_md = next((f.data for f in loaded_files if f.path == "SKILL.md"), b"")
    instructions = bundle_lib.parse_skill_md(skill_md).body
    return LoadedSkill(
        skill=skill,
        version=version,
        policy=policy,
        files=loaded_files,
        instructions=instructions,
        content_hash=computed,
    )


# --- review and approval ---------------------------------------------------------------------


def _last_approved_version(policy: Policy) -> SkillVersion | None:
    if policy.approved_version_id is not None:
        return policy.approved_version
    event = (
        PolicyAuditEvent.objects.filter(
            policy=policy,
            action__in=[AuditAction.APPROVED, AuditAction.ROLLED_BACK],
            to_status=PolicyStatus.APPROVED,
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if event is None or event.version_number is None:
        return None
    return SkillVersion.objects.filter(skill=policy.skill, number=event.version_number).first()


def policy_review(*, policy: Policy | int, actor: Actor) -> Policy:
    """Compute and store the deterministic review of the skill's current version for this policy.

    Facts (skills.bundle.review_bundle) plus the diff against the last version this agent
    approved; pending_review (or needs_reapproval) → reviewed. A reviewed policy whose review
    covers content that is no longer current (another agent's run or an import installed a new
    version) is reviewed again; a current review is not redone.
    """
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        version = skill.current_version
        if version is None:
            raise SkillNotFound(f"Skill {skill.name!r} has no installed version.")
        stale = (
            policy.status == PolicyStatus.REVIEWED and policy.reviewed_hash != version.content_hash
        )
        if not stale and policy.status not in (
            PolicyStatus.PENDING_REVIEW,
            PolicyStatus.NEEDS_REAPPROVAL,
        ):
            raise PolicyTransitionNotAllowed(
                f"Cannot review policy of skill {skill.name!r} for agent "
                f"{_agent_name(policy.agent)!r}: status is {policy.status!r}.",
                details={"action": "review", "status": policy.status},
            )
        files = _version_files(version)
        computed = _recompute_hash(files)
        if computed != version.content_hash:
            raise SkillHashMismatch(
                f"Skill {skill.name!r} v{version.number}: stored files hash to {computed}, "
                f"not the recorded {version.content_hash}; refusing to review tampered content.",
                details={"expected": version.content_hash, "actual": computed},
            )
        current_files = {f.path: bytes(f.data) for f in files}
        facts = bundle_lib.review_bundle(
            current_files,
            declared_domains=policy.allowed_domains,
            declared_credentials=policy.required_credentials,
            provenance=dict(version.provenance) or None,
            skill_name=skill.name,
            installed_names=Skill.objects.exclude(pk=skill.pk).values_list("name", flat=True),
        )
        facts_json: dict[str, Any] = facts.to_dict()
        facts_json["credentials_set"] = sorted(decrypt_json(policy.credential_values))
        previous = _last_approved_version(policy)
        if previous is not None and previous.pk != version.pk:
            previous_files = {f.path: bytes(f.data) for f in _version_files(previous)}
            facts_json["diff"] = bundle_lib.diff_bundles(previous_files, current_files).to_dict()
        else:
            facts_json["diff"] = None
        facts_json["diff_base_version"] = previous.number if previous else None
        facts_json["version"] = version.number
        before, after = _apply(
            policy,
            "review",
            policy.review,
            facts=facts_json,
            content_hash=version.content_hash,
            at=timezone.now(),
        )
        policy.save()
        _audit(
            action=AuditAction.REVIEWED,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            content_hash=version.content_hash,
            version_number=version.number,
        )
        return policy


def policy_approve(*, policy: Policy | int, actor: Actor, note: str = "") -> Policy:
    """Approve the skill's current content for this agent (reviewed or needs_reapproval → approved).

    Needs an active staff user with `skills.approve_policy`. From reviewed, the review must be of
    the current content (`StaleReview` otherwise). The stored bytes are re-hashed first.
    """
    _require_approver(actor, what="approve skill policies")
    _require_storable("note", note)
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        version = skill.current_version
        if version is None:
            raise SkillNotFound(f"Skill {skill.name!r} has no installed version.")
        if policy.status == PolicyStatus.REVIEWED and policy.reviewed_hash != version.content_hash:
            raise StaleReview(
                f"The review of {skill.name!r} covers {policy.reviewed_hash}, but the current "
                f"version v{version.number} is {version.content_hash}; review it again.",
                details={"reviewed_hash": policy.reviewed_hash, "current": version.content_hash},
            )
        computed = _recompute_hash(_version_files(version))
        if computed != version.content_hash:
            raise SkillHashMismatch(
                f"Skill {skill.name!r} v{version.number}: stored files hash to {computed}, not "
                f"the recorded {version.content_hash}; refusing to approve.",
                details={"expected": version.content_hash, "actual": computed},
            )
        before, after = _apply(
            policy,
            "approve",
            policy.approve,
            by=actor.user,
            at=timezone.now(),
            content_hash=version.content_hash,
            version=version,
        )
        policy.save()
        _audit(
            action=AuditAction.APPROVED,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            reason=note,
            content_hash=version.content_hash,
            version_number=version.number,
        )
        return policy


def policy_reject(*, policy: Policy | int, note: str, actor: Actor) -> Policy:
    """Decline the skill for this agent: → pending_review with the note (which is required)."""
    note = (note or "").strip()
    if not note:
        raise PolicyValidationError(
            "A rejection needs a note saying what is wrong.",
            details={"field": "note", "rule": "required"},
        )
    _require_storable("note", note)
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        before, after = _apply(policy, "reject", policy.reject, note=note)
        policy.save()
        version = skill.current_version
        _audit(
            action=AuditAction.REJECTED,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            reason=note,
            content_hash=version.content_hash if version else "",
            version_number=version.number if version else None,
        )
        return policy


def policy_rollback(*, policy: Policy | int, version: SkillVersion | int, actor: Actor) -> Policy:
    """Make an older version the skill's current one, as seen from this agent's policy.

    Lands approved when this agent approved that exact hash before (per the audit trail) —
    which needs the approve permission — otherwise pending_review.
    """
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        number = version if isinstance(version, int) else version.number
        if not isinstance(version, int) and version.skill_id != skill.pk:
            raise SkillVersionNotFound(
                f"Version {version.pk} belongs to another skill, not {skill.name!r}.",
                details={"skill": skill.name, "version_id": version.pk},
            )
        target = SkillVersion.objects.filter(skill=skill, number=number).first()
        if target is None:
            raise SkillVersionNotFound(
                f"Skill {skill.name!r} has no version {number}.",
                details={"skill": skill.name, "number": number},
            )
        if skill.current_version_id == target.pk:
            raise PolicyTransitionNotAllowed(
                f"Version {number} is already the current version of {skill.name!r}.",
                details={"action": "rollback", "status": policy.status, "number": number},
            )
        computed = _recompute_hash(_version_files(target))
        if computed != target.content_hash:
            raise SkillHashMismatch(
                f"Skill {skill.name!r} v{number}: stored files hash to {computed}, not the "
                f"recorded {target.content_hash}; refusing to roll back to it.",
                details={"expected": target.content_hash, "actual": computed},
            )
        approved_before = PolicyAuditEvent.objects.filter(
            agent_ref_id=policy.agent_id,
            skill_name=skill.name,
            action__in=[AuditAction.APPROVED, AuditAction.ROLLED_BACK],
            to_status=PolicyStatus.APPROVED,
            content_hash=target.content_hash,
        ).exists()
        if approved_before:
            _require_approver(actor, what="restore an approved version")
            before, after = _apply(
                policy,
                "roll back",
                policy.restore_approved,
                by=actor.user,
                at=timezone.now(),
                content_hash=target.content_hash,
                version=target,
            )
        else:
            before, after = _apply(policy, "roll back", policy.content_changed)
        previous = skill.current_version
        skill.current_version = target
        skill.description = target.description
        skill.save(update_fields=["current_version", "description", "updated_at"])
        policy.save()
        _audit(
            action=AuditAction.ROLLED_BACK,
            actor=actor,
            policy=policy,
            from_status=before,
            to_status=after,
            reason=(
                f"v{previous.number if previous else '-'} -> v{target.number}"
                + ("; this content was approved before" if approved_before else "")
            ),
            content_hash=target.content_hash,
            version_number=target.number,
        )
        return policy


def policy_create(*, skill: Skill | str, agent: Model, actor: Actor) -> Policy:
    """Give `agent` a policy for `skill`; it starts as needs_reapproval (no approved content)."""
    with transaction.atomic():
        locked = (
            _lock_skill(name=skill) if isinstance(skill, str) else _lock_skill(skill_id=skill.pk)
        )
        if Policy.objects.filter(skill=locked, agent=agent).exists():
            raise PolicyTransitionNotAllowed(
                f"Agent {_agent_name(agent)!r} already has a policy for {locked.name!r}.",
                details={"action": "create", "skill": locked.name},
            )
        policy = Policy.objects.create(
            skill=locked, agent=agent, status=PolicyStatus.NEEDS_REAPPROVAL
        )
        _audit(
            action=AuditAction.POLICY_CREATED,
            actor=actor,
            policy=policy,
            to_status=policy.status,
            content_hash=locked.current_version.content_hash if locked.current_version else "",
            version_number=locked.current_version.number if locked.current_version else None,
        )
        return policy


def policy_update(
    *,
    policy: Policy | int,
    actor: Actor,
    allowed_domains: Sequence[str] | None = None,
    required_credentials: Sequence[str] | None = None,
    tools: Sequence[str] | None = None,
    dependencies: Sequence[str] | None = None,
    inputs: Mapping[str, Any] | None = None,
    set_credentials: Mapping[str, str] | None = None,
    clear_credentials: Iterable[str] | None = None,
    reason: str = "",
) -> Policy:
    """Edit policy fields; the status is kept (seed 000 Scenario 8). `None` leaves a field alone.

    Credential values are write-only: `set_credentials` stores values for names that are in
    required_credentials (after this edit), `clear_credentials` removes names. The audit row
    records field changes, and for credentials only the names.
    """
    given = {
        k: v
        for k, v in {
            "allowed_domains": allowed_domains,
            "required_credentials": required_credentials,
            "tools": tools,
            "dependencies": dependencies,
            "inputs": inputs,
        }.items()
        if v is not None
    }
    fields = _validated_policy_fields(given, source="policy update")
    _require_storable("reason", reason)
    with transaction.atomic():
        skill, policy = _lock_skill_and_policy(policy)
        changes: dict[str, Any] = {}
        for name, value in fields.items():
            old = getattr(policy, name)
            if old != value:
                changes[name] = {"from": old, "to": value}
                setattr(policy, name, value)
        to_set = dict(set_credentials or {})
        to_clear = sorted(set(clear_credentials or ()))
        if to_set or to_clear:
            bad = sorted(n for n in to_set if n not in policy.required_credentials)
            if bad:
                raise PolicyValidationError(
                    f"Credential {bad[0]!r} is not in required_credentials of {skill.name!r}; "
                    "add the name there first.",
                    details={
                        "field": "credential_values",
                        "rule": "in_required_credentials",
                        "value": bad[0],
                    },
                )
            empty = sorted(n for n, v in to_set.items() if not isinstance(v, str) or not v)
            if empty:
                raise PolicyValidationError(
                    f"Credential {empty[0]!r} needs a non-empty value (use clear to remove it).",
                    details={"field": "credential_values", "rule": "non_empty", "value": empty[0]},
                )
            values = decrypt_json(policy.credential_values)
            cleared = [n for n in to_clear if n in values]
            for n in cleared:
                del values[n]
            values.update(to_set)
            policy.credential_values = encrypt_json(values)
            changes["credential_values"] = {
                **({"set": {n: REDACTED for n in sorted(to_set)}} if to_set else {}),
                **({"cleared": cleared} if cleared else {}),
            }
        if not changes:
            return policy
        policy.save()
        version = skill.current_version
        _audit(
            action=AuditAction.POLICY_UPDATED,
            actor=actor,
            policy=policy,
            from_status=policy.status,
            to_status=policy.status,
            reason=reason,
            content_hash=version.content_hash if version else "",
            version_number=version.number if version else None,
            changes=changes,
        )
        return policy


def skill_delete(*, skill: Skill | str, actor: Actor, reason: str = "") -> None:
    """Delete a skill with its versions, files and policies; the audit trail stays."""
    _require_storable("reason", reason)
    with transaction.atomic():
        locked = (
            _lock_skill(name=skill) if isinstance(skill, str) else _lock_skill(skill_id=skill.pk)
        )
        # Lock the policies too (after the skill, per the lock order) so no approval races this.
        policies = list(
            Policy.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(skill=locked)
        )
        version = locked.current_version
        _audit(
            action=AuditAction.SKILL_DELETED,
            actor=actor,
            skill=locked,
            reason=reason,
            content_hash=version.content_hash if version else "",
            version_number=version.number if version else None,
            changes={
                "versions": SkillVersion.objects.filter(skill=locked).count(),
                "policies": [{"agent": _agent_name(p.agent), "status": p.status} for p in policies],
            },
        )
        # Clear the self-reference first so deleting versions does not trip over it.
        Skill.objects.filter(pk=locked.pk).update(current_version=None)
        locked.delete()
