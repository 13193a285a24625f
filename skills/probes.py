"""Recording what a version showed when it ran in a test sandbox (`VersionProbe`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.utils import timezone

from .models import SkillVersion, VersionProbe

#: most characters of test output kept with a version
MAX_TEST_OUTPUT_CHARS = 20_000


def version_probe_record(
    *,
    version: SkillVersion,
    tools: Sequence[Mapping[str, Any]],
    tests_passed: bool,
    test_output: str,
    checked_by: str,
) -> VersionProbe:
    """Store (or replace) the probe of `version`: discovered tools and test results."""
    probe, _ = VersionProbe.objects.update_or_create(
        version=version,
        defaults={
            "tools": [dict(tool) for tool in tools],
            "tests_passed": tests_passed,
            "test_output": test_output.replace("\x00", "")[-MAX_TEST_OUTPUT_CHARS:],
            "checked_by": checked_by[:200],
            "checked_at": timezone.now(),
        },
    )
    return probe
