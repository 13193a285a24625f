# ruff: noqa: F811 - pytest fixtures imported from core_support are parameters here
"""A skill's declared dependencies: installed once per (skill version, dependency list) in a
sandbox from a real package index (pypiserver, tests.fixtures.package_index) or npm registry
(Verdaccio, tests.fixtures.npm_index), mounted read-only into every run of that skill, shown in
the run's trace, and collected once no approved version needs them. Changing them is a policy
edit: the approval stays. An install in progress is killed by a cancel or the run's deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.utils import timezone

from cognition.core_act import core_act
from cognition.principals import Principal
from cognition.services import credential_set
from runs.accounting import run_usage
from runs.admin import console_state
from runs.layer_step import INSTALL_TOOL
from runs.layers import (
    LayerReady,
    LayerStopped,
    layer_ensure,
    layer_key,
    layer_packages,
    layers_collect,
)
from runs.lease import default_owner
from runs.models import DependencyLayer, LayerStatus, MotorRun, RunStatus, Step
from runs.records import SliceOutcome
from runs.selectors import run_log, run_status
from runs.services import run_cancel, run_step
from sandbox.reaper import bwrap_sandboxes
from skills.models import Policy, PolicyStatus
from skills.policy_edits import policy_update
from skills.services import Actor
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.npm_index import NpmIndex
from tests.fixtures.package_index import PackageIndex
from tests.fixtures.upstream import STALLED_PORT
from tests.runs.helpers import drive

from .conftest import World
from .core_support import _clean_mutex_keys, skill_in_status, workspaces  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PRINT_VALUE = "import mcdemo\nprint('value', mcdemo.VALUE)\n"


@pytest.fixture
def index(package_index: PackageIndex, settings, monkeypatch, tmp_path: Path) -> PackageIndex:
    """Installs go to the local index; layers to a directory of this test."""
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", package_index.egress_hosts)
    settings.MOTOR_PIP_INDEX_URL = package_index.url
    settings.MOTOR_PIP_DOWNLOAD_HOSTS = []
    settings.MOTOR_DEPENDENCY_LAYERS_DIR = tmp_path / "layers"
    return package_index


@pytest.fixture
def weather(world: World, workspaces, tmp_path: Path) -> Policy:
    policy = skill_in_status(
        tmp_path / "src", agent=world.alpha, approver=world.olivia, status="approved"
    )
    credential_set(agent=world.alpha, name="WEATHER_TOKEN", value="tok-12345678", actor="test")
    return policy


def _declare(policy: Policy, dependencies: list[str]) -> Policy:
    return policy_update(policy=policy, actor=Actor.system("test"), dependencies=dependencies)


def _run(world: World, scripted_llm, code: str = PRINT_VALUE) -> MotorRun:
    run_id = core_act(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        mode="agentic",
        task="Report the weather",
        skill="weather-report",
        trigger="api",
    )["run_id"]
    scripted_llm.add(reply_tools(tool_call("code", {"code": code}, call_id="c")), reply_text("ok"))
    drive(run_id, scripted_llm.client())
    return MotorRun.objects.get(pk=run_id)


def _steps(run: MotorRun) -> list[tuple[str, dict]]:
    return [
        (step.tool, step.result)
        for step in Step.objects.filter(attempt__run=run).order_by("iteration", "call_index")
    ]


def test_a_skill_run_installs_its_dependencies_once_and_later_runs_reuse_the_layer(
    world, weather, index, scripted_llm, settings
):
    # given an approved skill whose policy now declares a dependency (a policy edit)
    policy = _declare(weather, ["mcdemo==1.0.0"])
    assert policy.status == PolicyStatus.APPROVED
    downloads = index.requests_for("mcdemo-1.0.0-py3-none-any.whl")

    # when it runs and its code imports the package
    run = _run(world, scripted_llm)

    # then the run completed, its trace starts with the install, and the code saw the package
    assert run.status == RunStatus.COMPLETED
    (install, install_result), (code, code_result) = _steps(run)
    assert (install, code) == (INSTALL_TOOL, "code")
    assert install_result["ok"] is True
    assert install_result["output"].startswith("installed 1 package (pip:mcdemo==1.0.0) in ")
    assert install_result["layer"]["reused"] is False
    assert install_result["duration_ms"] > 0
    assert Step.objects.get(attempt__run=run, tool=INSTALL_TOOL).arguments == {
        "packages": ["pip:mcdemo==1.0.0"]
    }
    assert code_result["output"].strip() == "value 42"
    # the install is in the trace but not among the calls the model made
    assert run_usage(run)["tool_calls"] == 1
    # the trace a reader sees (API run detail, admin console, log) shows the install step
    detail = run_status(run_id=run.pk)["steps"][0]
    assert (detail["tool"], detail["iteration"], detail["ok"]) == (INSTALL_TOOL, 0, True)
    assert detail["arguments"] == {"packages": ["pip:mcdemo==1.0.0"]}
    assert detail["duration_ms"] == install_result["duration_ms"]
    assert console_state(run)["steps"][0]["output_preview"] == install_result["output"]
    assert f"{INSTALL_TOOL} " in run_log(run_id=run.pk)
    # the layer is one complete, read-only directory; no temporary directory is left
    layer = DependencyLayer.objects.get()
    assert (layer.status, layer.packages) == (LayerStatus.READY, ["pip:mcdemo==1.0.0"])
    root = Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR)
    assert [p.name for p in root.iterdir()] == [layer.key]
    assert (root / layer.key / "python" / "mcdemo.py").read_text() == "VALUE = 42\n"
    assert not (root / layer.key).stat().st_mode & 0o222
    assert index.requests_for("mcdemo-1.0.0-py3-none-any.whl") == downloads + 1

    # when the skill runs again
    again = _run(world, scripted_llm)
    # then the layer is reused: nothing is downloaded, the trace says so
    (install, install_result), (_, code_result) = _steps(again)
    assert install_result["output"].startswith("reused 1 package (pip:mcdemo==1.0.0) in ")
    assert install_result["layer"] == {"key": layer.key, "reused": True}
    assert code_result["output"].strip() == "value 42"
    assert index.requests_for("mcdemo-1.0.0-py3-none-any.whl") == downloads + 1
    assert DependencyLayer.objects.count() == 1


def test_changing_the_dependencies_keeps_the_approval_and_the_old_layer_is_collected(
    world, weather, index, scripted_llm, settings
):
    _declare(weather, ["mcdemo==1.0.0"])
    first = _run(world, scripted_llm)
    old = DependencyLayer.objects.get()

    # when the owner pins another version: a policy edit, the status stays approved
    policy = _declare(weather, ["mcdemo==2.0.0"])
    assert policy.status == PolicyStatus.APPROVED
    second = _run(world, scripted_llm)

    # then the run gets a new layer with the new version
    assert _steps(first)[1][1]["output"].strip() == "value 42"
    assert _steps(second)[1][1]["output"].strip() == "value 43"
    new = DependencyLayer.objects.exclude(pk=old.pk).get()
    assert new.packages == ["pip:mcdemo==2.0.0"]
    root = Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR)

    # when the collector runs while the old layer was used recently: it stays
    assert layers_collect() == {"removed": 0, "temporary": 0}
    assert (root / old.key).is_dir()
    # once its last use is older than the keep period, the layer no approved version needs goes
    DependencyLayer.objects.filter(pk__in=[old.pk, new.pk]).update(last_used_at=None)
    assert layers_collect() == {"removed": 1, "temporary": 0}
    assert list(DependencyLayer.objects.values_list("key", flat=True)) == [new.key]
    assert sorted(p.name for p in root.iterdir()) == [new.key]


def test_a_dependency_the_index_does_not_hold_fails_the_run_with_the_installers_message(
    world, weather, index, scripted_llm, settings
):
    _declare(weather, ["nosuchpackage==1.0.0"])
    run = _run(world, scripted_llm)

    # then the run failed before the model was asked anything, saying what pip said
    assert run.status == RunStatus.FAILED
    failure = run.result["failure"]
    assert failure["message"].startswith("installing the skill's dependencies failed:\n")
    assert "No matching distribution found for nosuchpackage==1.0.0" in failure["message"]
    assert failure["last_step"] == f"{INSTALL_TOOL} (iteration 0)"
    assert scripted_llm.requests == []
    ((tool, result),) = _steps(run)
    assert (tool, result["ok"], result["error_code"]) == (INSTALL_TOOL, False, "exit_nonzero")
    assert "No matching distribution found for nosuchpackage==1.0.0" in result["output"]
    # and no layer exists: a failed row, no directory left behind
    assert DependencyLayer.objects.get().status == LayerStatus.FAILED
    root = Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR)
    assert list(root.iterdir()) == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_callers_needing_one_layer_install_it_once(world, weather, index):
    # given two workers needing the same layer at the same moment
    version = weather.approved_version
    downloads = index.requests_for("mcdemo-2.0.0-py3-none-any.whl")
    results: list[LayerReady | BaseException] = []
    start = threading.Barrier(2)

    def need(owner: str) -> None:
        try:
            start.wait()
            results.append(
                layer_ensure(
                    version_id=version.pk,
                    version_hash=version.content_hash,
                    dependencies=["mcdemo==2.0.0"],
                    owner=owner,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=need, args=(f"w{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    # then both got the same complete layer, one of them built it, the index served it once
    assert all(isinstance(r, LayerReady) for r in results), results
    assert len({r.path for r in results}) == 1
    assert sorted(r.installed for r in results) == [False, True]
    assert DependencyLayer.objects.get().build_serial == 1
    assert index.requests_for("mcdemo-2.0.0-py3-none-any.whl") == downloads + 1


# --- a builder killed mid-install ------------------------------------------------------------

_BUILDER = """
import os, sys, django
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
django.setup()
from runs.layers import layer_ensure
from runs.lease import default_owner
layer_ensure(version_id=int(sys.argv[1]), version_hash=sys.argv[2],
             dependencies=["mcdemo==1.0.0"], owner=default_owner())
"""


def _database_url() -> str:
    """The test database, for a process of its own (SQLite: the test database's file)."""
    params = connections["default"].settings_dict
    if connections["default"].vendor == "sqlite":
        return f"sqlite:///{params['NAME']}"
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{params.get('PORT') or 5432}/{params['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_a_builder_killed_mid_install_leaves_no_layer_in_use_and_the_next_caller_builds_it(
    world, weather, index, settings
):
    # given a worker process installing a layer from an index that never answers (its
    # connections hang), so the install is in progress when the worker is SIGKILLed
    version = weather.approved_version
    root = Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR)
    stalled = f"http://pypi.layers.test:{STALLED_PORT}/simple/"
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "MOTOR_PIP_INDEX_URL": stalled,
        "MOTOR_PIP_DOWNLOAD_HOSTS": "",
        "MOTOR_DEPENDENCY_LAYERS_DIR": str(root),
        "MOTOR_SANDBOX_EGRESS_HOSTS": index.egress_hosts,
    }
    builder = subprocess.Popen(
        [sys.executable, "-c", _BUILDER, str(version.pk), version.content_hash],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (
            DependencyLayer.objects.filter(status=LayerStatus.BUILDING).exists()
            and root.is_dir()
            and any(p.name.startswith(".build-") and any(p.iterdir()) for p in root.iterdir())
        ):
            assert builder.poll() is None, "the builder ended before it was killed"
            assert time.monotonic() < deadline, "the install never started"
            time.sleep(0.2)
        time.sleep(1.0)  # pip is at work inside the sandbox
    finally:
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait()

    # then what it leaves is a claimed row and a temporary directory, never a layer
    row = DependencyLayer.objects.get()
    assert (row.status, row.build_serial) == (LayerStatus.BUILDING, 1)
    assert not (root / row.key).exists()
    (half,) = [p for p in root.iterdir() if p.name.startswith(".build-")]

    # when a run needs the layer: the dead builder's claim is taken over at once, and the
    # layer is built complete from the (now answering) index
    started = time.monotonic()
    ready = layer_ensure(
        version_id=version.pk,
        version_hash=version.content_hash,
        dependencies=["mcdemo==1.0.0"],
        owner=default_owner(),
    )
    assert time.monotonic() - started < 60  # not the claim's expiry (install timeout + 60 s)
    assert (ready.path, ready.installed) == (root / row.key, True)
    assert (ready.path / "python" / "mcdemo.py").read_text() == "VALUE = 42\n"
    row.refresh_from_db()
    assert (row.status, row.build_serial) == (LayerStatus.READY, 2)
    # and the collector removes the dead build's directory, keeping the approved layer
    assert layers_collect() == {"removed": 0, "temporary": 1}
    assert not half.exists() and ready.path.is_dir()


def test_the_collector_runs_on_beat(settings, tmp_path):
    from config.celery import app

    settings.MOTOR_DEPENDENCY_LAYERS_DIR = tmp_path
    (tmp_path / ".build-0123-1-abcd").mkdir()  # a build whose row is gone
    assert settings.CELERY_BEAT_SCHEDULE["dependency-layers-gc"] == {
        "task": "runs.layers_collect",
        "schedule": float(settings.MOTOR_PURGE_INTERVAL_SECONDS),
    }
    assert app.tasks["runs.layers_collect"]() == {"removed": 0, "temporary": 1}
    assert list(tmp_path.iterdir()) == []


# --- npm ---------------------------------------------------------------------------------------

NODE_REQUIRE = """
import subprocess
done = subprocess.run(
    ["node", "-e", "console.log('value', require('mcdemo-npm').value)"],
    capture_output=True, text=True,
)
print(done.returncode, done.stdout.strip(), done.stderr.strip())
"""


@pytest.fixture
def registry(npm_index: NpmIndex, settings, monkeypatch, tmp_path: Path) -> NpmIndex:
    """npm installs go to the local registry; layers to a directory of this test."""
    monkeypatch.setenv("MOTOR_SANDBOX_EGRESS_HOSTS", npm_index.egress_hosts)
    settings.MOTOR_NPM_REGISTRY_URL = npm_index.url
    settings.MOTOR_DEPENDENCY_LAYERS_DIR = tmp_path / "layers"
    return npm_index


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_an_npm_dependency_is_installed_and_node_in_the_run_requires_it(
    world, weather, registry, scripted_llm, settings, backend
):
    # given an approved skill that declares an npm package, on `backend` (install and run)
    settings.SANDBOX_BACKEND = backend
    _declare(weather, ["npm:mcdemo-npm@1.0.0"])
    # when it runs and its code step starts node, which requires the package
    run = _run(world, scripted_llm, code=NODE_REQUIRE)
    # then the install step installed it and node (under the run's memory limit) printed its value
    assert run.status == RunStatus.COMPLETED
    (install, install_result), (code, code_result) = _steps(run)
    assert (install, code) == (INSTALL_TOOL, "code")
    assert install_result["output"].startswith("installed 1 package (npm:mcdemo-npm@1.0.0) in ")
    assert code_result["output"].strip() == "0 value 42"
    layer = DependencyLayer.objects.get()
    installed = Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR) / layer.key / "node" / "node_modules"
    assert (installed / "mcdemo-npm" / "index.js").read_text() == (
        "module.exports = { value: 42 };\n"
    )


# --- an install stopped by a cancel or the deadline ----------------------------------------------


def _stalled(settings) -> None:
    """The pip index is one whose connections hang: an install waits on it for minutes."""
    settings.MOTOR_PIP_INDEX_URL = f"http://pypi.layers.test:{STALLED_PORT}/simple/"


def _install_in_progress(settings) -> bool:
    root = Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR)
    return (
        DependencyLayer.objects.filter(status=LayerStatus.BUILDING).exists()
        and root.is_dir()
        and any(p.name.startswith(".build-") and any(p.iterdir()) for p in root.iterdir())
    )


def _layer_sandboxes() -> list[str]:
    return [session for session in bwrap_sandboxes() if session.startswith("layer-")]


def _start(world: World, scripted_llm) -> str:
    run_id = core_act(
        principal=Principal.for_agent(world.alpha),
        agent=world.alpha,
        mode="agentic",
        task="Report the weather",
        skill="weather-report",
        trigger="api",
    )["run_id"]
    scripted_llm.add(reply_text("never asked"))
    return run_id


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_run_during_its_install_kills_the_install_and_keeps_no_layer(
    world, weather, index, scripted_llm, settings
):
    # given a run whose dependency install is in progress (in a slice on a worker thread)
    settings.MOTOR_CALL_WATCH_INTERVAL_SECONDS = 0.2
    _declare(weather, ["mcdemo==1.0.0"])
    _stalled(settings)
    run_id = _start(world, scripted_llm)
    outcomes: list[SliceOutcome] = []

    def slice_() -> None:
        try:
            outcomes.append(run_step(run_id=run_id, client=scripted_llm.client(), owner="w1"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=slice_)
    thread.start()
    deadline = time.monotonic() + 60
    while not _install_in_progress(settings):
        assert thread.is_alive() and time.monotonic() < deadline, "the install never started"
        time.sleep(0.1)
    time.sleep(1.0)  # pip is at work inside the sandbox
    assert len(_layer_sandboxes()) == 1

    # when the run is cancelled
    assert run_cancel(run_id=run_id, actor="t")["new_status"] == "cancelled"
    cancelled_at = time.monotonic()
    thread.join(timeout=30)

    # then the slice ended within seconds, as a lost lease, and the run stays cancelled
    assert thread.is_alive() is False
    assert time.monotonic() - cancelled_at < 5
    assert outcomes == [SliceOutcome.LEASE_LOST]
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.result["failure"]["category"] == "cancelled"
    # the install's sandbox and every process in it are gone
    assert _layer_sandboxes() == []
    # no layer is ready or claimed, and nothing of the half-built one is left on disk
    assert DependencyLayer.objects.count() == 0
    assert list(Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR).iterdir()) == []
    # the model was never asked, and the trace holds no install step
    assert scripted_llm.requests == []
    assert _steps(run) == []


def test_a_run_whose_deadline_passes_during_its_install_fails_as_timed_out(
    world, weather, index, scripted_llm, settings
):
    # given a run with 8 s left whose dependency install cannot finish (its index hangs)
    _declare(weather, ["mcdemo==1.0.0"])
    _stalled(settings)
    run_id = _start(world, scripted_llm)
    MotorRun.objects.filter(pk=run_id).update(timeout_s=8)
    started = time.monotonic()
    # when its slice runs
    outcomes = drive(run_id, scripted_llm.client())
    # then the install was killed at the deadline and the run failed as timed out
    took = time.monotonic() - started
    assert 6 < took < 20, took
    assert outcomes == [SliceOutcome.FINISHED]
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert (run.result["failure"]["category"], run.result["failure"]["message"]) == (
        "timeout",
        "the run exceeded its timeout of 8 s",
    )
    assert _layer_sandboxes() == []
    assert DependencyLayer.objects.count() == 0
    assert list(Path(settings.MOTOR_DEPENDENCY_LAYERS_DIR).iterdir()) == []
    assert scripted_llm.requests == []


def test_a_caller_waiting_for_another_builder_stops_when_told_and_leaves_its_claim_alone(
    world, weather, index
):
    # given a layer another live worker is building (its claim unexpired)
    version = weather.approved_version
    packages = layer_packages(["mcdemo==1.0.0"])
    key = layer_key(version.content_hash, packages)
    DependencyLayer.objects.create(
        key=key,
        skill_version=version,
        packages=list(packages),
        status=LayerStatus.BUILDING,
        build_serial=3,
        builder=default_owner(),
        build_expires_at=timezone.now() + timedelta(minutes=10),
    )
    before = DependencyLayer.objects.values().get()
    # when a caller waits for it and is told to stop after a second
    started = time.monotonic()
    with pytest.raises(LayerStopped):
        layer_ensure(
            version_id=version.pk,
            version_hash=version.content_hash,
            dependencies=["mcdemo==1.0.0"],
            owner="waiter",
            should_stop=lambda: time.monotonic() - started > 1.0,
        )
    # then it stopped waiting at once, and the builder's claim is as it was
    assert 1.0 < time.monotonic() - started < 3.0
    assert DependencyLayer.objects.values().get() == before
