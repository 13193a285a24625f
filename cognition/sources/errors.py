"""Errors of skill sources and acquisition (codes the API and the brain read)."""

from __future__ import annotations

from cognition.errors import CognitionError


class SourceUnavailable(CognitionError):
    """One source did not answer usefully (timeout, HTTP error, malformed or oversized answer,
    unreadable directory); `details` name the source and the rule."""

    code = "skill_source_unavailable"
    http_status = 502


class SourcesUnavailable(CognitionError):
    """No configured source answered; `details["sources"]` holds each one's error."""

    code = "skill_sources_unavailable"
    http_status = 502


class NoSkillSources(CognitionError):
    """No source is configured and enabled."""

    code = "no_skill_sources"
    http_status = 409


class AcquisitionNotFound(CognitionError):
    code = "acquisition_not_found"
    http_status = 404


class AcquisitionClosed(CognitionError):
    """The proposal was already decided (installed or failed)."""

    code = "acquisition_closed"
    http_status = 409


class AcquisitionInvalid(CognitionError):
    """The yes names no candidate of the proposal; `details` say which rule."""

    code = "acquisition_invalid"
    http_status = 400
