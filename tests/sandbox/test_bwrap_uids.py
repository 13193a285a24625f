"""Leasing host uids to bwrap sessions: a uid is never leased while a process of it runs, and a
uid whose last holder saw its sandbox end cleanly is leased again without a walk over /proc."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends import bwrap_session, bwrap_uids
from sandbox.backends.bwrap import BwrapBackend, BwrapSession
from sandbox.backends.bwrap_uids import _UidLease
from sandbox.types import ExecRequest, SandboxError, SessionSpec
from tests.sandbox.test_bwrap_session import live_processes_of, wait_until

#: a uid of the default sandbox range that the tests below run a process as by hand
LONE_UID = 609_998


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    path = tmp_path / "uids"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def forget_released_uids() -> Iterator[None]:
    saved = list(_UidLease._released_clean)
    _UidLease._released_clean.clear()
    yield
    _UidLease._released_clean[:] = saved


@pytest.fixture
def process_of_lone_uid() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"], user=LONE_UID, group=LONE_UID, extra_groups=[])
    assert wait_until(lambda: proc.pid in live_processes_of(LONE_UID))
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.usefixtures("forget_released_uids")
def test_a_uid_with_a_live_process_is_not_leased_when_no_holder_released_it_clean(
    lock_dir: Path, process_of_lone_uid: subprocess.Popen[bytes]
) -> None:
    # given the only uid of the range runs a process, and no holder ever leased it
    only = range(LONE_UID, LONE_UID + 1)
    # then it is not leased: the process is found
    with pytest.raises(SandboxError, match="no free sandbox uid"):
        _UidLease.acquire(only, lock_dir)
    # nor when a holder leased it and died holding it (its lock file says nothing)
    (lock_dir / f"{LONE_UID}.lock").write_bytes(b"")
    with pytest.raises(SandboxError, match="no free sandbox uid"):
        _UidLease.acquire(only, lock_dir)


@pytest.mark.usefixtures("forget_released_uids")
def test_a_uid_released_clean_is_leased_again_first_and_without_a_look(
    lock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a uid that this process released clean
    uids = range(600_000, 610_000)
    first = _UidLease.acquire(uids, lock_dir)
    first.release(clean=True)
    assert (lock_dir / f"{first.uid}.lock").read_bytes() == b"clean"
    looked: list[int] = []
    real = bwrap_uids._processes_of_uid
    monkeypatch.setattr(
        bwrap_uids, "_processes_of_uid", lambda uid: looked.append(uid) or real(uid)
    )
    # when the next lease is taken
    again = _UidLease.acquire(uids, lock_dir)
    try:
        # then it is that uid, taken without a walk over /proc, and its lock file no longer says
        # clean while it is leased (a holder that dies now leaves the look to the next one)
        assert again.uid == first.uid
        assert looked == []
        assert (lock_dir / f"{again.uid}.lock").read_bytes() == b""
    finally:
        again.release()
    # and a uid released without `clean` is looked at by the next holder
    third = _UidLease.acquire(range(again.uid, again.uid + 1), lock_dir)
    third.release()
    assert looked == [again.uid]


def test_a_session_closed_during_a_call_leaves_no_process_and_releases_its_uid_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a session whose call is running a detached daemon and a command when it is closed
    workspace = tmp_path / "ws"
    workspace.mkdir()
    backend = BwrapBackend()
    session = backend.open(SessionSpec(workspace=workspace))
    assert isinstance(session, BwrapSession) and session.lease is not None
    uid = session.host_uid
    lock_file = session.runtime_dir.parent / "uids" / f"{uid}.lock"
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            session.exec(ExecRequest(argv=["sh", "-c", "setsid sleep 60 & sleep 60"], timeout_s=90))
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # bwrap, the supervisor, the shell and the two sleeps
    assert wait_until(lambda: len(live_processes_of(uid)) >= 4)
    looked: list[int] = []
    monkeypatch.setattr(bwrap_session, "_processes_of_uid", lambda uid: looked.append(uid) or [])
    # when it is closed
    session.close()
    caller.join(30)
    # then the call failed, and close() needed no walk over /proc to know that nothing of its
    # uid runs: nothing does the moment it returned; the uid is marked clean
    assert [type(exc) for exc in outcome] == [SandboxError]
    assert looked == []
    assert live_processes_of(uid) == []
    assert lock_file.read_bytes() == b"clean"
    # and the next session of this process gets that uid and works
    again = backend.open(SessionSpec(workspace=workspace))
    try:
        assert again.host_uid == uid
        assert again.exec(ExecRequest(argv=["true"])).exit_code == 0
    finally:
        again.close()
