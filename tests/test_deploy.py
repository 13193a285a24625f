"""The deployment files: docker-compose.yml is accepted by Compose and runs only real commands."""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[1]
APP_SERVICES = ("web", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_config_accepts_the_file(tmp_path: Path) -> None:
    # given the compose file next to an (empty) .env, as a user would have it
    compose_bin = shutil.which("docker-compose")
    assert compose_bin, "docker-compose is installed by bin/setup-host --with-docker"
    shutil.copy(ROOT / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("SECRET_KEY=x\nMOTOR_CREDENTIALS_KEY=y\n")
    # when Compose parses and validates it
    out = subprocess.run(
        [compose_bin, "-f", str(tmp_path / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    # then it is accepted
    assert (out.returncode, out.stderr) == (0, "")


def test_web_worker_and_beat_share_one_image_and_the_data_volume(compose: dict) -> None:
    services = compose["services"]
    images = {services[name]["image"] for name in APP_SERVICES}
    builds = {str(services[name]["build"]) for name in APP_SERVICES}
    assert images == {"motor-cortex:latest"}
    assert builds == {"."}
    assert "motor-data" in compose["volumes"]
    for name in ("web", "worker"):
        assert "motor-data:/data" in services[name]["volumes"]


def test_postgres_and_redis_have_healthchecks_the_app_waits_for(compose: dict) -> None:
    services = compose["services"]
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"]
    for name in APP_SERVICES:
        assert {
            key: value
            for key, value in services[name]["depends_on"].items()
            if key != "minio-bucket"
        } == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }


def _commands_of(service: dict) -> list[list[str]]:
    command = service["command"]
    if command[:2] == ["sh", "-c"]:
        return [shlex.split(part) for part in command[2].split("&&")]
    return [command]


def test_every_command_the_app_services_run_exists_in_the_project(compose: dict) -> None:
    django_commands = get_commands()
    checked = []
    for name in APP_SERVICES:
        for argv in _commands_of(compose["services"][name]):
            program = argv[0]
            if program == "python":
                assert argv[1] == "manage.py" and (ROOT / "manage.py").is_file()
                assert argv[2] in django_commands, f"{name}: unknown management command {argv[2]}"
            elif program == "celery":
                assert argv[1:3] == ["-A", "config"]
                assert importlib.import_module("config").celery_app.main == "motor_cortex"
                assert argv[3] in {"worker", "beat"}
            elif program == "gunicorn":
                module, attr = argv[1].split(":")
                assert callable(getattr(importlib.import_module(module), attr))
            else:
                raise AssertionError(f"{name}: unexpected program {program!r}")
            assert shutil.which(program) or program == "python", f"{program} is not installed"
            checked.append((name, program))
    assert {svc for svc, _ in checked} == set(APP_SERVICES)


def test_sandbox_image_dockerfile_is_referenced_and_exists(compose: dict) -> None:
    build = compose["services"]["sandbox-image"]["build"]
    assert (ROOT / build["dockerfile"]).is_file()


def test_the_worker_image_runs_unprivileged_so_it_needs_no_sandbox_launcher(
    compose: dict,
) -> None:
    # the sandbox launcher (sandbox/launcher/) serves root workers only; the image has no C
    # compiler to build it, which is right only while its worker is not root
    users = [
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("USER ")
    ]
    assert users and users[-1] not in ("root", "0")
    assert "user" not in compose["services"]["worker"]


def test_every_long_running_service_is_started_again_when_it_exits(compose: dict) -> None:
    services = compose["services"]
    for name in (*APP_SERVICES, "postgres", "redis"):
        assert services[name]["restart"] == "unless-stopped", name


def _supervise(tmp_path: Path, command: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(ROOT / "bin" / "supervise"), "job", "sh", "-c", command],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **env},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_bin_supervise_starts_an_exiting_process_again_with_growing_pauses(
    tmp_path: Path,
) -> None:
    # given a process that records when it started and exits at once with status 3
    starts = tmp_path / "starts"
    supervisor = _supervise(tmp_path, f"date +%s.%N >> {starts}; exit 3")
    # when it has been started three times
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_lines(starts)) < 3:
            time.sleep(0.1)
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        _, stderr = supervisor.communicate(timeout=10)
    # then it was started again after 1 s, then after 2 s, each exit reported with its status
    t0, t1, t2 = (float(line) for line in _lines(starts)[:3])
    assert (t1 - t0 >= 0.9, t2 - t1 >= 1.9) == (True, True)
    assert stderr.splitlines()[:2] == [
        "supervise: job exited with status 3; starting it again in 1s",
        "supervise: job exited with status 3; starting it again in 2s",
    ]


def test_bin_supervise_stops_its_process_on_sigterm(tmp_path: Path) -> None:
    # given a supervised long-running process
    pid_file = tmp_path / "pid"
    supervisor = _supervise(tmp_path, f"echo $$ > {pid_file}; exec sleep 300")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not pid_file.exists():
        time.sleep(0.05)
    child = int(pid_file.read_text())
    # when the supervisor gets SIGTERM (what bin/dev sends when it ends)
    supervisor.send_signal(signal.SIGTERM)
    # then it stops the process and itself, starting nothing again
    assert supervisor.wait(timeout=10) == 0
    assert not Path(f"/proc/{child}").exists()
    assert supervisor.stderr.read() == ""


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_workers_scale_as_hosts_of_their_own_sharing_the_snapshot_store(compose: dict) -> None:
    services = compose["services"]
    worker = services["worker"]
    # nothing pins one container: no fixed name, host id or port (`--scale worker=3`)
    assert "container_name" not in worker and "ports" not in worker
    assert "MOTOR_HOST_ID" not in worker["environment"]
    # every worker snapshots run workspaces to the object store, which exists before it starts
    env = worker["environment"]
    assert env["MOTOR_SNAPSHOT_STORAGE_URL"] == "s3://motor-snapshots/workspaces"
    assert env["MOTOR_SNAPSHOT_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert env["DATABASE_URL"] == services["web"]["environment"]["DATABASE_URL"]
    assert worker["depends_on"]["minio-bucket"] == {"condition": "service_completed_successfully"}
    assert "motor-snapshots" in " ".join(services["minio-bucket"]["entrypoint"])
    assert services["minio"]["restart"] == "unless-stopped"
    assert "minio-data" in compose["volumes"]
