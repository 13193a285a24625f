"""The launcher a root worker starts bwrap through (sandbox/launcher/motor-launch.c): its
command line, its failures (named, before anything runs) and the backend's fallback to a full
fork of the worker when it is missing."""

from __future__ import annotations

import logging
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends import bwrap as bwrap_module
from sandbox.backends.bwrap import BwrapBackend, BwrapSession
from sandbox.backends.bwrap_launch import launcher_argv, usable_launcher
from sandbox.types import ExecRequest, SandboxError, SessionSpec
from tests.sandbox.test_bwrap_session import live_processes_of

#: a uid of the default sandbox range the launcher is run as by hand
LONE_UID = 609_997


def _host_ids(pid: int) -> dict[str, str]:
    """The Uid, Gid and Groups lines of /proc/<pid>/status."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {
        key: value.strip()
        for key, _, value in (line.partition(":") for line in lines)
        if key in ("Uid", "Gid", "Groups")
    }


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A directory of root's that other uids may traverse (not list), as a runtime dir is."""
    path = Path(tempfile.mkdtemp(prefix="motor-launch-test-"))
    os.chmod(path, 0o711)  # noqa: S103 - traverse only
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "too few arguments"),
        (["0", "1", "0", "--", "/usr/bin/touch", "{marker}"], "UID must be a number from 1"),
        (["1x", "1", "0", "--", "/usr/bin/touch", "{marker}"], "UID must be a number from 1"),
        (["1", "-1", "0", "--", "/usr/bin/touch", "{marker}"], "GID must be a number from 1"),
        (["1", "1", "65", "--", "/usr/bin/touch", "{marker}"], "N must be a number of binds"),
        (["1", "1", "1", "--", "/usr/bin/touch", "{marker}"], "then --"),
        (["1", "1", "0", "/usr/bin/touch", "{marker}"], "then --"),
        (["1", "1", "0", "--", "touch", "{marker}"], "must be an absolute path"),
        (["1", "1", "1", "tmp", "/tmp", "--", "/usr/bin/touch", "{marker}"], "absolute paths"),
    ],
)
def test_the_launcher_refuses_a_bad_command_line_and_runs_nothing(
    sandbox_launcher: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    marker = tmp_path / "ran"
    argv = [a.replace("{marker}", str(marker)) for a in argv]
    result = subprocess.run([sandbox_launcher, *argv], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("motor-launch: ")
    assert message in result.stderr.splitlines()[0]
    assert not marker.exists()


def test_a_failing_bind_ends_the_launcher_before_the_program_runs(
    sandbox_launcher: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    target = tmp_path / "target"
    target.mkdir()
    missing = tmp_path / "missing"
    argv = [str(LONE_UID), str(LONE_UID), "1", str(missing), str(target)]
    result = subprocess.run(
        [sandbox_launcher, *argv, "--", "/usr/bin/touch", str(marker)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 127
    assert result.stderr == (
        f"motor-launch: bind {missing} onto {target}: No such file or directory\n"
    )
    assert not marker.exists()


def test_the_launcher_binds_privately_and_drops_to_the_uid_with_no_groups(
    sandbox_launcher: Path, reachable_dir: Path, tmp_path: Path
) -> None:
    # given a readable directory the uid cannot reach (under root's 0700 tmp_path), and a
    # target it can
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    (private / "secret").write_text("hello\n")
    target = reachable_dir / "target"
    target.mkdir()
    # when the launcher runs a program through the bind, as the uid
    script = f"cat {private}/secret || echo denied; cat {target}/secret; id -u; id -g; id -G; grep -c {target} /proc/self/mountinfo"
    result = subprocess.run(
        [sandbox_launcher, str(LONE_UID), str(LONE_UID), "1", str(private), str(target)]
        + ["--", "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        env={},
    )
    # then it reads the file as that uid, with its own gid as its only group, and the bind is
    # in its mount namespace only
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == [
        "denied",
        "hello",
        f"{LONE_UID}",
        f"{LONE_UID}",
        f"{LONE_UID}",
        "1",
        "",
    ]
    assert str(target) not in Path("/proc/self/mountinfo").read_text()


def test_sessions_start_through_the_launcher_as_the_leased_uid_without_groups(
    sandbox_launcher: Path, reachable_dir: Path, tmp_path: Path
) -> None:
    # given a backend that found the launcher
    backend = BwrapBackend(runtime_root=reachable_dir / "rt", sweep=False)
    assert backend.launcher == str(sandbox_launcher)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = backend.open(SessionSpec(workspace=workspace))
    try:
        assert isinstance(session, BwrapSession)
        # then bwrap runs as the leased uid with no supplementary groups, and the root-only
        # workspace is the sandbox's
        uid = session.host_uid
        ids = _host_ids(session.pid)
        assert ids == {
            "Uid": f"{uid}\t{uid}\t{uid}\t{uid}",
            "Gid": f"{uid}\t{uid}\t{uid}\t{uid}",
            "Groups": "",
        }
        result = session.exec(ExecRequest(argv=["sh", "-c", "echo hi > made && cat made"]))
        assert result.stdout == b"hi\n"
        assert (workspace / "made").read_text() == "hi\n"
    finally:
        session.close()


def test_opening_through_the_launcher_copies_nothing_of_the_opener(
    reachable_dir: Path, tmp_path: Path
) -> None:
    """A fork marks every page of the opener copy-on-write, so the opener's next write to each
    one faults; vfork (Popen with no preexec_fn and no uid/gid arguments) leaves them alone."""
    ballast = bytearray(64 * 1024 * 1024)
    pages = range(0, len(ballast), 4096)
    for i in pages:
        ballast[i] = 1
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def faults_writing_the_ballast_after_a_session(backend: BwrapBackend) -> int:
        backend.open(SessionSpec(workspace=workspace)).close()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for i in pages:
            ballast[i] += 1
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    runtime_root = reachable_dir / "rt"
    through_launcher = BwrapBackend(runtime_root=runtime_root, sweep=False)
    through_fork = BwrapBackend(runtime_root=runtime_root, sweep=False, launcher="")
    assert through_launcher.launcher is not None and through_fork.launcher is None
    assert faults_writing_the_ballast_after_a_session(through_launcher) < 32
    assert faults_writing_the_ballast_after_a_session(through_fork) > len(pages) // 2


def test_a_failing_launch_step_fails_the_session_naming_it_and_leaves_nothing(
    reachable_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a launch whose first staged bind has lost its source
    missing = tmp_path / "gone"

    def losing_the_source(
        launcher: str, staged: list[tuple[bytes, bytes]], uid: int, gid: int, args: list[str]
    ) -> list[str | bytes]:
        staged = [(os.fsencode(missing), staged[0][1]), *staged[1:]]
        return launcher_argv(launcher, staged, uid, gid, args)

    monkeypatch.setattr(bwrap_module, "launcher_argv", losing_the_source)
    runtime_root = reachable_dir / "rt"
    backend = BwrapBackend(runtime_root=runtime_root, sweep=False)
    assert backend.launcher is not None
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # when a session is opened
    with pytest.raises(SandboxError) as raised:
        backend.open(SessionSpec(workspace=workspace))
    # then the error names the step, and no process, runtime dir or mount is left
    assert f"motor-launch: bind {missing} onto " in str(raised.value)
    assert "No such file or directory" in str(raised.value)
    assert [p.name for p in runtime_root.iterdir()] == ["uids"]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            assert os.fsencode(runtime_root) not in cmdline
    assert str(runtime_root) not in Path("/proc/self/mountinfo").read_text()


def test_without_the_launcher_sessions_start_through_a_fork_of_the_worker(
    reachable_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a backend configured with a launcher that is not there
    missing = str(tmp_path / "no-launcher")
    with caplog.at_level(logging.WARNING, logger="sandbox.backends.bwrap_launch"):
        backend = BwrapBackend(runtime_root=reachable_dir / "rt", sweep=False, launcher=missing)
    assert backend.launcher is None
    assert f"sandbox launcher {missing} is not usable" in caplog.text
    # when a session opens, then it runs as its leased uid with the workspace reachable
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = backend.open(SessionSpec(workspace=workspace))
    try:
        assert isinstance(session, BwrapSession)
        uid = session.host_uid
        assert _host_ids(session.pid)["Uid"] == f"{uid}\t{uid}\t{uid}\t{uid}"
        assert _host_ids(session.pid)["Groups"] == ""
        result = session.exec(ExecRequest(argv=["sh", "-c", "echo hi > made && cat made"]))
        assert result.stdout == b"hi\n"
        assert (workspace / "made").read_text() == "hi\n"
    finally:
        session.close()
    assert live_processes_of(uid) == []


def test_a_launcher_others_could_replace_is_not_used(
    sandbox_launcher: Path, tmp_path: Path
) -> None:
    # a copy in a directory anyone may write to
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # noqa: S103 - the unsafe place under test
    copy = open_dir / "motor-launch"
    shutil.copy2(sandbox_launcher, copy)
    assert usable_launcher(str(copy)) is None
    # a copy someone else owns, in root's own directory
    safe_dir = tmp_path / "safe"
    safe_dir.mkdir(mode=0o755)
    owned = safe_dir / "motor-launch"
    shutil.copy2(sandbox_launcher, owned)
    os.chown(owned, LONE_UID, LONE_UID)
    assert usable_launcher(str(owned)) is None
    # not executable
    plain = safe_dir / "plain"
    shutil.copy2(sandbox_launcher, plain)
    os.chmod(plain, 0o644)
    assert usable_launcher(str(plain)) is None
    # the one built by its script is
    assert usable_launcher(str(sandbox_launcher)) == str(sandbox_launcher)
    # and an empty setting turns it off
    assert usable_launcher("") is None
