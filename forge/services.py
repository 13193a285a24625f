"""State changes of deployed MCP servers: deploy (with hot reload), disable, enable, remove, and
the record of every call (usage counts, crashes, the failing-skill signal)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from forge.errors import DeployError, ServerStateError
from forge.models import (
    LIVE_STATUSES,
    TOOL_SEPARATOR,
    DeployedServer,
    McpTool,
    ServerStatus,
)
from forge.runtime import ServerPlan, pool
from runs.credentials import redact
from skills.bundle import McpManifest, parse_manifest
from skills.bundle.types import SKILL_TOML
from skills.models import Policy, PolicyStatus, Skill, SkillVersion

logger = logging.getLogger(__name__)

#: a skill failing more than this share of its latest calls is signalled to its owner
FAILING_RATE = 0.3
#: ... once it has at least this many recorded calls
FAILING_MIN_CALLS = 10


def version_files(version: SkillVersion) -> dict[str, bytes]:
    """The stored files of `version` as ``{path: bytes}``."""
    return {f.path: bytes(f.data) for f in version.files.all()}


def version_manifest(files: Mapping[str, bytes]) -> McpManifest:
    """The validated manifest of a stored version; DeployError when it is no MCP skill."""
    raw = files.get(SKILL_TOML)
    if raw is None:
        raise DeployError("the version has no skill.toml: it is not an MCP skill")
    manifest, problems = parse_manifest(raw, files=files)
    if manifest is None:
        raise DeployError("skill.toml is invalid: " + "; ".join(str(p) for p in problems))
    return manifest


def approving_policy(version: SkillVersion) -> Policy | None:
    """An approved policy of the version's skill bound to exactly this version's content."""
    return (
        Policy.objects.filter(
            skill_id=version.skill_id,
            status=PolicyStatus.APPROVED,
            approved_content_hash=version.content_hash,
        )
        .order_by("pk")
        .first()
    )


def credentials_for(agent_id: int, manifest_auth: Mapping[str, str]) -> dict[str, str]:
    """{server environment variable: value} from the vault (FORGE_CREDENTIAL_RESOLVER). Values
    live in memory for the spawn only. DeployError names the missing credentials, never a
    value."""
    if not manifest_auth:
        return {}
    path = str(getattr(settings, "FORGE_CREDENTIAL_RESOLVER", ""))
    if not path:
        raise DeployError("no credential resolver is configured (FORGE_CREDENTIAL_RESOLVER)")
    names = sorted(set(manifest_auth.values()))
    try:
        values = dict(import_string(path)(agent_id=agent_id, names=names))
    except Exception as exc:  # noqa: BLE001 - the text could quote a value: the type only
        raise DeployError(
            f"credentials {', '.join(names)} could not be resolved ({type(exc).__name__})"
        ) from None
    missing = [name for name in names if not values.get(name)]
    if missing:
        raise DeployError(f"credentials not set: {', '.join(missing)}")
    return {env: values[name] for env, name in manifest_auth.items()}


def deploy_version(skill_version: SkillVersion | int, *, actor: str) -> DeployedServer:
    """Make `skill_version` its skill's deployed MCP server.

    The version must be an MCP skill whose content an approved policy is bound to. Its server is
    probed first (a throwaway sandbox); then, in one transaction, the previous live row of the
    skill becomes superseded (its calls in flight drain, no new call reaches it) and the new row
    and its tools are written. Deploying a version already deployed returns its row (two workers
    deploying the same version at once end with one row). Raises DeployError."""
    from forge.probe import probe_server

    version = (
        skill_version
        if isinstance(skill_version, SkillVersion)
        else SkillVersion.objects.filter(pk=skill_version).first()
    )
    if version is None:
        raise DeployError(f"skill version {skill_version} does not exist")
    existing = DeployedServer.objects.filter(version=version).first()
    if existing is not None and existing.status in LIVE_STATUSES:
        return existing
    files = version_files(version)
    manifest = version_manifest(files)
    policy = approving_policy(version)
    if policy is None:
        raise DeployError(
            f"version {version.number} of {version.skill.name} is not approved: no approved "
            "policy is bound to its content hash"
        )
    credentials = credentials_for(policy.agent_id, manifest.auth)
    allowed = tuple(policy.allowed_domains or manifest.allowed_domains)
    probe = probe_server(files, manifest, credentials=credentials)
    if probe.error is not None:
        raise DeployError(f"the server failed its probe: {probe.error}")
    limits = manifest.sandbox.to_dict()
    try:
        with transaction.atomic():
            Skill.objects.select_for_update().get(pk=version.skill_id)
            existing = DeployedServer.objects.filter(version=version).first()
            if existing is not None and existing.status in LIVE_STATUSES:
                return existing
            DeployedServer.objects.filter(
                skill_id=version.skill_id, status__in=LIVE_STATUSES
            ).update(
                status=ServerStatus.SUPERSEDED,
                status_by=actor,
                status_at=timezone.now(),
                updated_at=timezone.now(),
            )
            if existing is not None:
                existing.delete()  # a superseded or removed row of this version comes back
            server = DeployedServer.objects.create(
                skill_id=version.skill_id,
                version=version,
                agent_id=policy.agent_id,
                status=ServerStatus.DEPLOYED,
                content_hash=version.content_hash,
                allowed_domains=list(allowed),
                credentials=dict(manifest.auth),
                limits=limits,
                deployed_by=actor,
                status_by=actor,
                status_at=timezone.now(),
            )
            McpTool.objects.bulk_create(
                McpTool(
                    server=server,
                    name=tool.name,
                    qualified_name=f"{version.skill.name}{TOOL_SEPARATOR}{tool.name}",
                    description=tool.description,
                    input_schema=tool.input_schema,
                    semantics=manifest.semantics_of(tool.name),
                )
                for tool in probe.tools
            )
            transaction.on_commit(_tools_changed)
    except IntegrityError:
        # another worker deployed the same skill in the meantime: its row stands
        winner = DeployedServer.objects.filter(version=version).first()
        if winner is not None:
            return winner
        raise DeployError("another deployment of this skill won; try again") from None
    logger.info(
        "deployed %s v%s as an MCP server (%s tools)",
        version.skill.name,
        version.number,
        len(probe.tools),
    )
    return server


def _set_status(
    skill: Skill | int, status: str, *, actor: str, allowed_from: tuple[str, ...]
) -> DeployedServer:
    skill_id = skill.pk if isinstance(skill, Skill) else skill
    with transaction.atomic():
        server = (
            DeployedServer.objects.select_for_update()
            .filter(skill_id=skill_id, status__in=LIVE_STATUSES)
            .first()
        )
        if server is None:
            raise ServerStateError("the skill has no deployed MCP server")
        if server.status not in allowed_from:
            raise ServerStateError(f"the server is {server.status}; it cannot become {status}")
        server.status = status
        server.status_by = actor
        server.status_at = timezone.now()
        if status == ServerStatus.DEPLOYED:
            server.crash_count = 0
            server.failure = ""
        server.save(
            update_fields=[
                "status",
                "status_by",
                "status_at",
                "crash_count",
                "failure",
                "updated_at",
            ]
        )
        transaction.on_commit(_tools_changed)
    if status != ServerStatus.DEPLOYED:
        pool.stop(server.pk)
    return server


def server_disable(skill: Skill | int, *, actor: str) -> DeployedServer:
    """Stop offering the skill's tools and stop its server; its files stay."""
    return _set_status(
        skill,
        ServerStatus.DISABLED,
        actor=actor,
        allowed_from=(ServerStatus.DEPLOYED, ServerStatus.FAILED),
    )


def server_enable(skill: Skill | int, *, actor: str) -> DeployedServer:
    """Offer a disabled (or failed) server's tools again; it starts on the next call."""
    return _set_status(
        skill,
        ServerStatus.DEPLOYED,
        actor=actor,
        allowed_from=(ServerStatus.DISABLED, ServerStatus.FAILED),
    )


def undeploy(skill: Skill | int, *, actor: str, reason: str = "") -> None:
    """Remove the skill's MCP server: its tools are no longer offered, its server stops on
    every worker (at the next call or reaper pass). The rows stay as history (removed)."""
    skill_id = skill.pk if isinstance(skill, Skill) else skill
    with transaction.atomic():
        servers = list(
            DeployedServer.objects.select_for_update().filter(
                skill_id=skill_id, status__in=LIVE_STATUSES
            )
        )
        for server in servers:
            server.status = ServerStatus.REMOVED
            server.status_by = actor
            server.status_at = timezone.now()
            server.failure = reason or server.failure
            server.save(update_fields=["status", "status_by", "status_at", "failure", "updated_at"])
        transaction.on_commit(_tools_changed)
    for server in servers:
        pool.stop(server.pk)


def _tools_changed() -> None:
    from forge.registry import tools_sync

    tools_sync()


# ---------------------------------------------------------------------------- the runtime side


def server_plan(server: DeployedServer) -> ServerPlan:
    """What a worker needs to start `server` (credentials resolved now, in memory only)."""
    files = version_files(server.version)
    manifest = version_manifest(files)
    return ServerPlan(
        server_id=server.pk,
        files=files,
        manifest=manifest,
        allowed_domains=tuple(server.allowed_domains),
        limits=dict(server.limits),
        credentials=credentials_for(server.agent_id, server.credentials),
    )


def server_record_crash(
    server_id: int, *, message: str, stderr_tail: str, secrets: Mapping[str, str]
) -> bool:
    """Count a crash of `server_id`'s server; after FORGE_MAX_CRASHES in a row the row becomes
    failed with how it ended and its stderr tail (credential values replaced). Returns True
    when it failed now."""
    limit = int(getattr(settings, "FORGE_MAX_CRASHES", 3))
    with transaction.atomic():
        server = DeployedServer.objects.select_for_update().filter(pk=server_id).first()
        if server is None:
            return False
        server.crash_count += 1
        failed = server.crash_count >= limit and server.status == ServerStatus.DEPLOYED
        fields = ["crash_count", "updated_at"]
        if failed:
            server.status = ServerStatus.FAILED
            server.status_by = f"the worker, after {server.crash_count} crashes in a row"
            server.status_at = timezone.now()
            server.failure = redact(f"{message}\n{stderr_tail}".strip(), dict(secrets))[-8000:]
            fields += ["status", "status_by", "status_at", "failure"]
            transaction.on_commit(_tools_changed)
        server.save(update_fields=fields)
    return failed


def tool_record_call(tool_id: int, *, ok: bool, error: str = "", refused: bool = False) -> None:
    """Count one call of a tool (and its server's latest outcomes); when the skill now fails
    more than FAILING_RATE of at least FAILING_MIN_CALLS latest calls, its owner gets one
    `skill_failing` signal for the streak (the improvement flow is theirs to start).

    `refused`: the server's state refused the call (disabled, failed, not approved...): it
    counts on the tool (calls, failures, last error) but not in the server's health window,
    since no server ran it."""
    from runs.outbox import signal_emit

    with transaction.atomic():
        tool = (
            McpTool.objects.select_for_update()
            .select_related("server", "server__skill")
            .get(pk=tool_id)
        )
        server = DeployedServer.objects.select_for_update().get(pk=tool.server_id)
        tool.calls += 1
        tool.last_called_at = timezone.now()
        if not ok:
            tool.failures += 1
            tool.last_error = error[:2000]
        tool.save(update_fields=["calls", "failures", "last_error", "last_called_at"])
        if refused:
            return
        from forge.models import RECENT_CALLS

        server.recent = (server.recent + ("1" if ok else "0"))[-RECENT_CALLS:]
        fields = ["recent", "updated_at"]
        if ok and server.crash_count:
            server.crash_count = 0
            fields.append("crash_count")
        rate = server.failure_rate or 0.0
        if len(server.recent) >= FAILING_MIN_CALLS and rate > FAILING_RATE:
            if server.failing_signalled_at is None:
                server.failing_signalled_at = timezone.now()
                fields.append("failing_signalled_at")
                signal_emit(
                    agent_id=server.agent_id,
                    kind="skill_failing",
                    payload={
                        "skill": tool.server.skill.name,
                        "version": server.version_id,
                        "failure_rate": round(rate, 3),
                        "calls": len(server.recent),
                        "last_error": tool.last_error[:500],
                        "offer": "improve",
                    },
                )
        elif server.failing_signalled_at is not None and rate <= FAILING_RATE:
            server.failing_signalled_at = None
            fields.append("failing_signalled_at")
        server.save(update_fields=fields)


def current_server_ids(candidates: set[int]) -> set[int]:
    """Which of `candidates` are still deployed (the pool's reaper asks; its thread's
    connection is closed again)."""
    try:
        return set(
            DeployedServer.objects.filter(
                pk__in=candidates, status=ServerStatus.DEPLOYED
            ).values_list("pk", flat=True)
        )
    finally:
        connection.close()
