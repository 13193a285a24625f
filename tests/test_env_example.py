""".env.example, the settings and the README agree: copying .env.example to .env changes nothing.

A user starts from .env.example; a value there that differs from the default the settings and the
README and docs/configuration.md state (a worker pool, a timeout) silently reconfigures their instance.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

# Prints every upper-case setting as JSON (paths and other objects as their repr).
DUMP_SETTINGS = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({k: repr(getattr(settings, k)) for k in dir(settings) if k.isupper()}))
"""

# Variables read outside config/settings.py (the sandbox library reads its own environment).
READ_OUTSIDE_SETTINGS = {
    "MOTOR_SANDBOX_UID_RANGE",
    "MOTOR_SANDBOX_RUNTIME_DIR",
    "MOTOR_SANDBOX_LAUNCHER",
    "MOTOR_SANDBOX_EGRESS_HOSTS",
    # read by Flower itself (manage.py flower checks it is set)
    "FLOWER_BASIC_AUTH",
}


def _example() -> dict[str, str]:
    """NAME -> value of every assignment line of .env.example."""
    values: dict[str, str] = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line.strip())
        if match:
            values[match[1]] = match[2]
    return values


def _settings_vars() -> set[str]:
    """Every variable config/settings.py reads through django-environ."""
    source = (ROOT / "config" / "settings.py").read_text()
    return set(re.findall(r"env\.\w+\(\s*\"([A-Z][A-Z0-9_]*)\"", source))


def _readme_defaults() -> dict[str, str]:
    """NAME -> default of docs/configuration.md's table (one name per row only)."""
    defaults: dict[str, str] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        match = re.match(r"\| `([A-Z][A-Z0-9_]*)` \| ([^|]*) \|", line)
        if match:
            defaults[match[1]] = match[2].strip()
    return defaults


def _settings_under(environment: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    out = subprocess.run(
        [sys.executable, "-c", DUMP_SETTINGS],
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", **environment},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_variable_the_settings_read_is_in_env_example() -> None:
    # given the variables config/settings.py reads and the ones .env.example lists
    read, listed = _settings_vars(), set(_example())
    # then each one a user may set is listed, and .env.example names nothing that is not read
    assert len(read) > 50
    assert sorted(read - listed) == []
    assert sorted(listed - read - READ_OUTSIDE_SETTINGS) == []


def test_every_variable_in_env_example_is_in_the_readme_table() -> None:
    # given the configuration table (a row may name two variables)
    table = (ROOT / "docs" / "configuration.md").read_text()
    # then every variable of .env.example has a row
    missing = [name for name in _example() if f"`{name}`" not in table]
    assert missing == []


def test_the_readme_rows_are_rows_of_the_configuration_table() -> None:
    # given the README's short table of the settings a first deployment needs
    table = [
        line.replace("docs/", "")
        for line in (ROOT / "docs" / "configuration.md").read_text().splitlines()
    ]
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration\n", 1)[1].split("\n## ", 1)[0]
    # (a link from the README into docs/ is the same link from docs/configuration.md)
    rows = [line.replace("docs/", "") for line in section.splitlines() if line.startswith("| `")]
    # then each row is the full table's row, word for word (one source of what a setting means)
    assert len(rows) >= 10
    assert [row for row in rows if row not in table] == []


def test_copying_env_example_to_env_changes_no_setting() -> None:
    # given the settings with nothing set but the two required keys
    keys = {"SECRET_KEY": "k" * 50, "MOTOR_CREDENTIALS_KEY": "x" * 44, "DEBUG": "false"}
    defaults = _settings_under(keys)
    # when every line of .env.example is set as written (the keys kept)
    example = {**_example(), **keys}
    configured = _settings_under(example)
    # then every setting is the same
    changed = {
        k: (defaults[k], configured.get(k)) for k in defaults if configured.get(k) != defaults[k]
    }
    assert changed == {}


def test_env_example_values_are_the_readme_defaults() -> None:
    # given the README's defaults written as one literal value (`…`)
    readme = _readme_defaults()
    literal = {
        name: default.strip("`")
        for name, default in readme.items()
        if re.fullmatch(r"`[^`]*`", default)
    }
    assert "CELERY_WORKER_POOL" in literal
    # then .env.example sets the same value (or leaves it empty, which means the default)
    example = _example()
    differing = {
        name: (value, example[name])
        for name, value in literal.items()
        if name in example and example[name] not in ("", value)
    }
    assert differing == {}


def test_compose_sets_no_worker_pool_other_than_the_default() -> None:
    # given the compose file's environment of the app services
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name in ("web", "worker", "beat"):
        environment = compose["services"][name].get("environment", {})
        # then the worker pool is the default the README documents (threads), or not set
        assert environment.get("CELERY_WORKER_POOL", "threads") == "threads"
    assert _example()["CELERY_WORKER_POOL"] in ("", "threads")
