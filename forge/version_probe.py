"""Probing every new MCP skill version for its review, whichever way it came in.

A third-party bundle imported in the admin or with `import_skills`, and a version SkillForge
generated, enter through the same import; after the commit that installed it, a version holding
a `skill.toml` is tested (pytest, then `initialize` + `tools/list`) in a throwaway sandbox, and
what it showed is kept with it (`skills.VersionProbe`) for the review page. A version that
already has its probe (SkillForge records its own test run) is not run again.
"""

from __future__ import annotations

import logging
from typing import Any

from skills.bundle import SKILL_TOML
from skills.models import SkillFile, SkillVersion, VersionProbe
from skills.probes import version_probe_record

from .bundles import BundleRefused, manifest_of
from .testing import bundle_test

logger = logging.getLogger(__name__)


def on_version_installed(*, version_id: int, **_: Any) -> None:
    """The skills app's `version_installed` receiver: queue a probe of an MCP skill version."""
    if not SkillFile.objects.filter(version_id=version_id, path=SKILL_TOML).exists():
        return
    from .tasks import forge_probe_version_task

    try:
        forge_probe_version_task.delay(version_id)
    except Exception:  # an unreachable broker: the review says the version was not probed
        logger.warning("version %s: the probe could not be queued", version_id)


def version_probe(*, version_id: int) -> str:
    """Test the version in a sandbox and record what it showed; "done", or why not."""
    version = SkillVersion.objects.filter(pk=version_id).first()
    if version is None:
        return "missing"
    if VersionProbe.objects.filter(version=version).exists():
        return "already probed"
    files = {f.path: bytes(f.data) for f in version.files.all()}
    try:
        manifest = manifest_of(files)
    except BundleRefused:
        return "not an MCP skill"
    report = bundle_test(files)
    version_probe_record(
        version=version,
        tools=[
            {**tool, "semantics": manifest.semantics_of(str(tool.get("name")))}
            for tool in report.tools
        ],
        tests_passed=report.passed,
        test_output=report.output if report.passed else report.feedback(),
        checked_by="forge probe",
    )
    return "done"
