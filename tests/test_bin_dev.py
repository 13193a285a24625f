"""bin/dev: the services log to files under the data dir and a short summary is printed last."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[1]


def _summary(tmp_path: Path) -> str:
    from io import StringIO

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "web.log").write_text("")
    (tmp_path / "admin-login.txt").write_text("admin\nsecret-pass\n")
    out = StringIO()
    call_command(
        "dev_summary", url="http://127.0.0.1:8123", logs=str(tmp_path / "logs"), stdout=out
    )
    return out.getvalue()


def test_the_summary_says_the_llm_is_not_configured(settings, tmp_path: Path) -> None:
    # given no LLM endpoint
    settings.MOTOR_DATA_DIR = tmp_path
    settings.LLM_BASE_URL = ""
    # when the summary is printed
    text = _summary(tmp_path)
    # then it gives the pages (the landing page first), the login, the logs and how to
    # configure an LLM
    assert "  Home:      http://127.0.0.1:8123/" in text
    assert text.index("  Home:") < text.index("  Chat:")
    assert "  Chat:      http://127.0.0.1:8123/chat/" in text
    assert "  Admin:     http://127.0.0.1:8123/admin/" in text
    assert "  API docs:  http://127.0.0.1:8123/api/docs/" in text
    assert f"  Login:     admin / secret-pass   (also in {tmp_path}/admin-login.txt)" in text
    assert "  LLM:       not configured: set LLM_BASE_URL and LLM_API_KEY" in text
    assert f"  Logs:      {tmp_path}/logs/ (web.log)" in text


def test_the_summary_names_the_llm_endpoint_and_models_never_the_key(
    settings, tmp_path: Path
) -> None:
    # given an endpoint with a key and a smart model of its own
    settings.MOTOR_DATA_DIR = tmp_path
    settings.LLM_BASE_URL = "https://llm.example.org/v1"
    settings.LLM_API_KEY = "sk-very-secret"
    settings.LLM_DEFAULT_MODEL = "small"
    settings.LLM_FAST_MODEL = ""
    settings.LLM_SMART_MODEL = "large"
    settings.LLM_MOTOR_MODEL = ""
    # when the summary is printed
    text = _summary(tmp_path)
    # then it names them, and says a key is set without showing it
    assert (
        "  LLM:       https://llm.example.org/v1 (API key set; models: fast small, smart large, "
        "motor small)"
    ) in text
    assert "sk-very-secret" not in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_bin_dev_prints_the_summary_last_and_logs_to_files(tmp_path: Path) -> None:
    # given a fresh data dir and a free port
    data, port = tmp_path / "data", _free_port()
    environment = {
        name: value
        for name, value in os.environ.items()
        if name in ("PATH", "HOME", "LANG", "UV_CACHE_DIR", "REDIS_URL")
    }
    environment.update(MOTOR_DATA_DIR=str(data), PORT=str(port), PYTHONUNBUFFERED="1")
    stdout = tmp_path / "stdout.txt"
    # when bin/dev is started as a user would
    with stdout.open("w") as out:
        dev = subprocess.Popen(
            ["bin/dev"],
            cwd=ROOT,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while "Stop:" not in stdout.read_text():
            assert dev.poll() is None, stdout.read_text()
            assert time.monotonic() < deadline, stdout.read_text()
            time.sleep(0.5)
        time.sleep(3)  # anything printed after the summary would be here now
        printed = stdout.read_text()
        # then the summary is the last thing printed, with the login of the data dir
        username, password = (data / "admin-login.txt").read_text().split("\n")[:2]
        lines = [line for line in printed.splitlines() if line.strip()]
        assert lines[-9:] == [
            "Motor Cortex is running.",
            f"  Home:      http://127.0.0.1:{port}/",
            f"  Chat:      http://127.0.0.1:{port}/chat/",
            f"  Admin:     http://127.0.0.1:{port}/admin/",
            f"  API docs:  http://127.0.0.1:{port}/api/docs/",
            f"  Login:     {username} / {password}   (also in {data}/admin-login.txt)",
            "  LLM:       not configured: set LLM_BASE_URL and LLM_API_KEY (environment or "
            ".env); the chat and runs need an OpenAI-compatible endpoint",
            f"  Logs:      {data}/logs/ (beat.log, setup.log, web.log, worker.log)",
            "  Stop:      Ctrl-C",
        ]
        # and nothing of the migrations, the Celery banners or the web server reached it
        assert len(lines) <= 13, printed
        for noise in ("Applying ", "celery@", "[tasks]", "Starting development server"):
            assert noise not in printed
        # and the services' output is in their files, and the web server answers
        logs = data / "logs"
        assert "Applying " in (logs / "setup.log").read_text()
        assert "celery@" in (logs / "worker.log").read_text()
        assert "beat: Starting" in (logs / "beat.log").read_text()
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
    finally:
        # when it is stopped with Ctrl-C
        os.killpg(dev.pid, signal.SIGINT)
        dev.wait(timeout=60)
    # then the web server is gone too
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


@pytest.mark.slow
def test_the_development_environment_regenerates_energy_in_minutes(tmp_path: Path) -> None:
    # given the environment bin/dev and bin/manage give their processes, in a fresh data dir
    environment = {
        name: value
        for name, value in os.environ.items()
        if name in ("PATH", "HOME", "LANG", "UV_CACHE_DIR")
    }
    environment["MOTOR_DATA_DIR"] = str(tmp_path / "data")
    # when a command reads the energy setting
    out = subprocess.run(
        [
            "bin/manage",
            "shell",
            "-c",
            "from django.conf import settings; print(settings.MOTOR_ENERGY_REGEN_PER_HOUR)",
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # then an agent regains 6 per hour there (an agentic run's 0.15 in 1.5 min), not 0.1
    assert (out.returncode, out.stdout.splitlines()[-1]) == (0, "6.0"), out.stderr
