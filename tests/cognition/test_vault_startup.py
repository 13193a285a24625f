"""The service refuses to start outside DEBUG without a credentials key; a key file works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]


def _check(env_overrides: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"MOTOR_CREDENTIALS_KEY", "MOTOR_CREDENTIALS_KEY_FILE", "DEBUG"}
    }
    env.update({"SECRET_KEY": "x", "MOTOR_DATA_DIR": str(tmp_path), **env_overrides})
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_key_outside_debug_the_service_does_not_start(tmp_path: Path) -> None:
    result = _check({"DEBUG": "false"}, tmp_path)
    assert result.returncode != 0
    assert "MOTOR_CREDENTIALS_KEY (or MOTOR_CREDENTIALS_KEY_FILE) is not set" in result.stderr


def test_a_key_file_is_enough(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(Fernet.generate_key().decode() + "\n")
    result = _check({"DEBUG": "false", "MOTOR_CREDENTIALS_KEY_FILE": str(key_file)}, tmp_path)
    assert result.returncode == 0, result.stderr
