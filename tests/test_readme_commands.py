"""The README's management commands work as written, in a fresh data dir, with no key set.

Each command line of the README's shell blocks that runs a management command is run as a user
would from the project directory, with its placeholders filled in and optional parts left out.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _readme_commands() -> list[str]:
    """Command lines of the README's ```sh blocks that run a management command."""
    readme = (ROOT / "README.md").read_text()
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.S):
        for line in block.splitlines():
            command = line.split("#", 1)[0].strip()
            if re.search(r"(^|\s)(bin/manage|manage\.py)\s", command + " "):
                commands.append(command)
    return commands


def _as_run(command: str, *, export_dir: Path) -> str:
    """`command` with optional parts left out and its placeholders filled in."""
    command = re.sub(r"\s*\[[^\]]*\]", "", command)
    command = command.replace("<dir-or-archive>", "skills/examples")
    command = command.replace("<dir>", str(export_dir))
    assert "<" not in command, f"unknown placeholder in README command {command!r}"
    return command


def test_the_readme_commands_run_as_written(tmp_path: Path) -> None:
    # given the README's management commands, in the order it lists them
    commands = _readme_commands()
    names = [re.search(r"(?:bin/manage|manage\.py)\s+(\S+)", c)[1] for c in commands]
    assert names[:5] == [
        "migrate",
        "import_skills",
        "export_skills",
        "verify_skill_hashes",
        "load_example_skills",
    ]
    # and a shell without the keys, database or debug flag a configured instance has
    data_dir = tmp_path / "data"
    environment = {
        name: value
        for name, value in os.environ.items()
        if name in ("PATH", "HOME", "LANG", "UV_CACHE_DIR", "REDIS_URL")
    }
    environment["MOTOR_DATA_DIR"] = str(data_dir)  # the one variable bin/dev documents
    # when each is run from the project directory
    for command in commands:
        out = subprocess.run(
            _as_run(command, export_dir=tmp_path / "export"),
            shell=True,
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        # then it succeeds
        assert out.returncode == 0, f"{command!r} failed:\n{out.stdout}\n{out.stderr}"
    # and worked on the development instance's files: its database and generated keys,
    # the imported examples exported again
    assert (data_dir / "motor-cortex.sqlite3").is_file()
    assert (data_dir / "secret-key").stat().st_mode & 0o777 == 0o600
    assert (data_dir / "credentials.key").stat().st_mode & 0o777 == 0o600
    examples = sorted(p.parent.name for p in (ROOT / "skills" / "examples").glob("*/SKILL.md"))
    exported = sorted(p.parent.name for p in (tmp_path / "export").glob("*/SKILL.md"))
    assert exported == examples
