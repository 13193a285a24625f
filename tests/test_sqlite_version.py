"""SQLite older than 3.35 (no RETURNING, which the run ledger's guarded writes use) stops
startup with an error naming the version found, the one needed and the way out."""

from __future__ import annotations

import sqlite3

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.sqlite import MIN_SQLITE, require_sqlite


@pytest.mark.parametrize("version", ["3.31.1", "3.34.9", "2.8.17"])
def test_an_older_sqlite_is_refused_naming_versions_and_the_way_out(version: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        require_sqlite(version)
    assert str(refused.value) == (
        f"SQLite {version} is too old: Motor Cortex needs SQLite 3.35 or newer (for "
        "RETURNING). Use a Python built with a newer SQLite (python.org builds and current "
        "distributions have one), or set DATABASE_URL to a PostgreSQL database."
    )


@pytest.mark.parametrize("version", ["3.35.0", "3.40.1", "3.45.10"])
def test_sqlite_3_35_or_newer_is_accepted(version: str) -> None:
    assert require_sqlite(version) is None


def test_this_interpreters_sqlite_is_checked_by_default() -> None:
    assert sqlite3.sqlite_version_info >= MIN_SQLITE
    assert require_sqlite() is None
