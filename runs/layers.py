"""Dependency layers on the host: which layer a (skill version, dependency list) has, who
builds it, and when it is removed.

`layer_ensure` returns the directory of a complete layer, building it first when none exists:
  * the `DependencyLayer` row is the lock. Whoever creates it (or takes over a failed build, one
    whose builder process on this host is gone, or one past `build_expires_at`) builds;
    everyone else waits for the row to turn ready or failed. Concurrent runs needing one layer install it once.
  * the build writes into MOTOR_DEPENDENCY_LAYERS_DIR/.build-<key>-<serial>-<random> and is
    renamed to MOTOR_DEPENDENCY_LAYERS_DIR/<key> only once every installer succeeded (one
    rename(2), atomic on one filesystem). A crash mid-install leaves a temporary directory
    that nothing mounts; the final directory exists only complete.
  * the install itself runs in a sandbox (sandbox.layers.layer_build) on the configured
    backend, whose egress reaches only MOTOR_PIP_INDEX_URL / MOTOR_NPM_REGISTRY_URL.

`layers_collect` (beat) removes the layers no approved skill version needs any more and no
active run uses, and temporary directories of builds that died.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.layer_models import DependencyLayer, LayerStatus
from runs.lease import owner_is_dead

logger = logging.getLogger(__name__)

#: seconds between two looks at a layer another worker is building
WAIT_POLL_S = 0.5
#: a layer used this recently is never collected (a run between two sessions still needs it)
KEEP_AFTER_USE = timedelta(hours=1)
_BUILD_PREFIX = ".build-"


@dataclass(frozen=True, slots=True)
class LayerReady:
    """A complete layer: its directory, key and packages; `installed` when this call built it
    (False: reused), and the time this call spent on it (building or waiting)."""

    path: Path
    key: str
    packages: tuple[str, ...]
    installed: bool
    duration_ms: int


class LayerStopped(Exception):
    """The caller's `should_stop` said stop while the layer was being built or waited for. A
    build of this caller's was killed, its directory removed and its claim given up (the row
    is deleted), so no layer of it is ever ready and the next caller builds afresh."""

    def __init__(self, *, duration_ms: int) -> None:
        super().__init__("the dependency install was stopped")
        self.duration_ms = duration_ms


class LayerFailed(Exception):
    """The layer could not be built: `message` is the installer's own output (its end)."""

    def __init__(self, message: str, *, retryable: bool, duration_ms: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.duration_ms = duration_ms


def layers_dir() -> Path:
    return Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR)


def install_timeout_s() -> float:
    return float(settings.MOTOR_DEPENDENCY_INSTALL_TIMEOUT_SECONDS)


def layer_packages(dependencies: Sequence[str]) -> tuple[str, ...]:
    """The canonical form of a policy's dependency list: each entry parsed (the policy's rule,
    skills.toolpolicy.dependencies) and written ecosystem:spec, sorted, duplicates dropped."""
    from skills.toolpolicy.dependencies import parse_dependency

    canonical = set()
    for entry in dependencies:
        dep = parse_dependency(entry)
        canonical.add(f"{dep.ecosystem}:{dep.spec()}")
    return tuple(sorted(canonical))


def layer_key(version_hash: str, packages: Sequence[str]) -> str:
    """sha256 hex of the skill version's content hash and the canonical package list."""
    payload = json.dumps({"version": version_hash, "packages": list(packages)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _index() -> Any:  # sandbox.layers.PackageIndex
    from sandbox.layers import PackageIndex

    return PackageIndex(
        pip_index_url=settings.MOTOR_PIP_INDEX_URL,
        npm_registry_url=settings.MOTOR_NPM_REGISTRY_URL,
        pip_download_hosts=tuple(h for h in settings.MOTOR_PIP_DOWNLOAD_HOSTS if h),
    )


def layer_ensure(
    *,
    version_id: int,
    version_hash: str,
    dependencies: Sequence[str],
    owner: str,
    should_stop: Callable[[], bool] | None = None,
) -> LayerReady:
    """The complete layer of (skill version, `dependencies`), built now if there is none.

    Raises LayerFailed with the installer's message when the build fails (this caller's, or
    the one it waited for), or when another builder's install outlives its time. Raises
    LayerStopped once `should_stop` (asked while building or waiting) answers True: a build in
    progress is killed (sandbox.layers.layer_build) and leaves nothing behind."""
    stop = should_stop or (lambda: False)
    packages = layer_packages(dependencies)
    key = layer_key(version_hash, packages)
    final = layers_dir() / key
    started = time.monotonic()
    waited_for: int | None = None
    # a builder that stops answering is taken over after its expiry: waiting ends by then
    deadline = started + install_timeout_s() * 2 + 60
    while True:
        verdict, serial, message = _claim(key, version_id, packages, owner, waited_for, final)
        elapsed = int((time.monotonic() - started) * 1000)
        if verdict == "ready":
            return LayerReady(final, key, packages, installed=False, duration_ms=elapsed)
        if verdict == "failed":
            raise LayerFailed(message, retryable=False, duration_ms=elapsed)
        if verdict == "build":
            return _build(key, serial, packages, final, started, stop)
        waited_for = serial
        if time.monotonic() > deadline:
            raise LayerFailed(
                "another worker's install of the same dependencies did not finish in time",
                retryable=True,
                duration_ms=elapsed,
            )
        if stop():
            raise LayerStopped(duration_ms=elapsed)
        time.sleep(WAIT_POLL_S)


def _claim(
    key: str,
    version_id: int,
    packages: tuple[str, ...],
    owner: str,
    waited_for: int | None,
    final: Path,
) -> tuple[str, int, str]:
    """One look at the row: ("ready", …), ("build", serial) when this caller now builds,
    ("wait", serial) while another builds, ("failed", serial, message) when the build this
    caller waited for failed."""
    now = timezone.now()
    expires = now + timedelta(seconds=install_timeout_s() + 60)
    with transaction.atomic():
        row = DependencyLayer.objects.select_for_update().filter(key=key).first()
        if row is None:
            try:
                with transaction.atomic():
                    row = DependencyLayer.objects.create(
                        key=key,
                        skill_version_id=version_id,
                        packages=list(packages),
                        status=LayerStatus.BUILDING,
                        build_serial=1,
                        builder=owner,
                        build_expires_at=expires,
                    )
            except IntegrityError:
                return "wait", 0, ""  # created meanwhile by another caller: look again
            return "build", 1, ""
        if row.status == LayerStatus.READY and final.is_dir():
            DependencyLayer.objects.filter(pk=row.pk).update(last_used_at=now)
            return "ready", row.build_serial, ""
        if (
            row.status == LayerStatus.BUILDING
            and row.build_expires_at
            and row.build_expires_at > now
            and not owner_is_dead(row.builder)
        ):
            return "wait", row.build_serial, ""
        if row.status == LayerStatus.FAILED and waited_for == row.build_serial:
            return "failed", row.build_serial, row.message
        # no build in progress (failed before, builder gone, or the directory was removed)
        serial = row.build_serial + 1
        DependencyLayer.objects.filter(pk=row.pk).update(
            status=LayerStatus.BUILDING,
            build_serial=serial,
            builder=owner,
            build_expires_at=expires,
            skill_version_id=version_id,
        )
        return "build", serial, ""


def _build(
    key: str,
    serial: int,
    packages: tuple[str, ...],
    final: Path,
    started: float,
    should_stop: Callable[[], bool],
) -> LayerReady:
    from sandbox.layers import Package, layer_build, layer_remove

    root = layers_dir()
    root.mkdir(parents=True, exist_ok=True)
    if final.is_dir():
        # a builder renamed it and died before saying so: the directory is complete
        _finish(key, serial, ok=True, message="", install_ms=0, size=_size(final))
        return LayerReady(final, key, packages, installed=False, duration_ms=_ms(started))
    temporary = root / f"{_BUILD_PREFIX}{key}-{serial}-{secrets.token_hex(4)}"
    temporary.mkdir(mode=0o755)
    parsed = []
    for entry in packages:
        ecosystem, _, spec = entry.partition(":")
        name, version = spec.split("==") if ecosystem == "pip" else spec.rsplit("@", 1)
        parsed.append(Package(ecosystem, name, version))
    try:
        outcome = layer_build(
            packages=parsed,
            index=_index(),
            target=temporary,
            backend=settings.SANDBOX_BACKEND,
            allow_local=bool(getattr(settings, "SANDBOX_ALLOW_LOCAL", False)),
            timeout_s=install_timeout_s(),
            session_id=f"layer-{key[:16]}-{serial}",
            should_stop=should_stop,
        )
    except BaseException:
        layer_remove(temporary)
        raise
    if outcome.stopped:
        layer_remove(temporary)
        # give the claim up: a waiter (or the next caller) then creates the row and builds
        DependencyLayer.objects.filter(
            key=key, build_serial=serial, status=LayerStatus.BUILDING
        ).delete()
        logger.info(
            "dependency layer %s: install stopped after %s ms", key[:12], outcome.duration_ms
        )
        raise LayerStopped(duration_ms=_ms(started))
    if not outcome.ok:
        layer_remove(temporary)
        _finish(key, serial, ok=False, message=outcome.output, install_ms=outcome.duration_ms)
        raise LayerFailed(outcome.output, retryable=outcome.timed_out, duration_ms=_ms(started))
    try:
        os.rename(temporary, final)
    except OSError:
        if not final.is_dir():
            layer_remove(temporary)
            raise
        layer_remove(temporary)  # a builder that took over finished first: use its layer
    _finish(
        key,
        serial,
        ok=True,
        message=outcome.output,
        install_ms=outcome.duration_ms,
        size=_size(final),
    )
    return LayerReady(final, key, packages, installed=True, duration_ms=_ms(started))


def _finish(
    key: str, serial: int, *, ok: bool, message: str, install_ms: int, size: int = 0
) -> None:
    """Record the outcome of build `serial` (a newer claim's row is left alone)."""
    now = timezone.now()
    values: dict[str, Any] = {
        "status": LayerStatus.READY if ok else LayerStatus.FAILED,
        "message": message,
        "install_ms": install_ms,
        "build_expires_at": None,
    }
    if ok:
        values.update(ready_at=now, last_used_at=now, size_bytes=size)
    DependencyLayer.objects.filter(key=key, build_serial=serial).update(**values)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _needed_keys() -> set[str]:
    """Keys of the layers an approved policy's version needs, or an active run may use."""
    from runs.models import ACTIVE_STATUSES, MotorRun
    from skills.models import Policy, PolicyStatus
    from skills.toolpolicy.dependencies import DependencyInvalid

    needed: set[str] = set()
    approved = Policy.objects.filter(
        status=PolicyStatus.APPROVED, approved_version__isnull=False
    ).select_related("approved_version")
    for policy in approved:
        if not policy.dependencies:
            continue
        try:
            packages = layer_packages(policy.dependencies)
        except DependencyInvalid:
            continue
        needed.add(layer_key(policy.approved_version.content_hash, packages))
    active_versions = set(
        MotorRun.objects.filter(
            status__in=ACTIVE_STATUSES, skill_version__isnull=False
        ).values_list("skill_version_id", flat=True)
    )
    needed.update(
        DependencyLayer.objects.filter(skill_version_id__in=active_versions).values_list(
            "key", flat=True
        )
    )
    return needed


def layers_collect() -> dict[str, int]:
    """Remove the layers no approved skill version needs and no active run uses (unless used
    within KEEP_AFTER_USE), failed rows, and temporary build directories whose build is over.
    Returns counts: {"removed", "temporary"}."""
    from sandbox.layers import layer_remove

    root = layers_dir()
    now = timezone.now()
    needed = _needed_keys()
    removed = 0
    for row in DependencyLayer.objects.exclude(status=LayerStatus.BUILDING):
        if row.key in needed:
            continue
        if row.last_used_at is not None and row.last_used_at > now - KEEP_AFTER_USE:
            continue
        with transaction.atomic():
            locked = DependencyLayer.objects.select_for_update().filter(pk=row.pk).first()
            if locked is None or locked.status == LayerStatus.BUILDING:
                continue
            if locked.last_used_at is not None and locked.last_used_at > now - KEEP_AFTER_USE:
                continue
            locked.delete()
            target = root / row.key
            if target.is_dir():
                # out of the way first (atomic): no caller finds a half-removed layer
                trash = root / f"{_BUILD_PREFIX}gc-{row.key}-{secrets.token_hex(4)}"
                os.rename(target, trash)
                layer_remove(trash)
        removed += 1
    temporary = 0
    if root.is_dir():
        building = {
            f"{_BUILD_PREFIX}{key}-{serial}-"
            for key, serial in DependencyLayer.objects.filter(
                status=LayerStatus.BUILDING
            ).values_list("key", "build_serial")
        }
        known = set(DependencyLayer.objects.values_list("key", flat=True))
        for entry in root.iterdir():
            name = entry.name
            if name.startswith(_BUILD_PREFIX):
                if any(name.startswith(prefix) for prefix in building):
                    continue  # a build in progress
                layer_remove(entry)
                temporary += 1
            elif entry.is_dir() and name not in known:
                layer_remove(entry)  # a layer whose row is gone
                removed += 1
    if removed or temporary:
        logger.info("dependency layers collected: %s removed, %s temporary", removed, temporary)
    return {"removed": removed, "temporary": temporary}
