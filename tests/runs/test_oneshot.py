"""Oneshot: synchronous Python in a fresh, network-less bwrap sandbox, nothing left behind."""

from __future__ import annotations

import math
import socket

import pytest

from runs.errors import InvalidRunParams
from runs.models import Attempt, MotorRun, Signal
from runs.oneshot import OneshotResult, oneshot_run


@pytest.fixture
def scratch(tmp_path):
    """The directory oneshot workspaces are created in, empty at the start."""
    path = tmp_path / "scratch"
    path.mkdir()
    return path


@pytest.mark.django_db
@pytest.mark.parametrize("code", ["2 + 2", "print(2 + 2)", "x = 2\nx + x"])
def test_a_computation_returns_its_result_and_writes_no_rows(code, scratch):
    # given a small computation
    # when it runs as a oneshot
    outcome = oneshot_run(code=code, scratch_dir=scratch)
    # then its result comes back directly
    assert (outcome.ok, outcome.result, outcome.error) == (True, "4", None)
    assert outcome.duration_ms >= 0
    # and no run, attempt or signal was created, and no workspace is left
    assert (MotorRun.objects.count(), Attempt.objects.count(), Signal.objects.count()) == (0, 0, 0)
    assert list(scratch.iterdir()) == []


def test_the_result_serialises_to_the_documented_shape(scratch):
    outcome = oneshot_run(code="'a' * 3", scratch_dir=scratch)
    assert outcome.to_dict() == {
        "ok": True,
        "result": "'aaa'",
        "duration_ms": outcome.duration_ms,
        "error": None,
    }


def test_an_exception_fails_with_the_traceback_tail_of_the_callers_code(scratch):
    # given a program that prints, then divides by zero on its third line
    code = "x = 1\nprint('before')\n1 / 0\n"
    # when it runs
    outcome = oneshot_run(code=code, scratch_dir=scratch)
    # then it failed with the traceback of the program's own frame only
    assert outcome.ok is False
    assert outcome.result == "before"
    assert outcome.error == (
        "exception: Traceback (most recent call last):\n"
        '  File "<oneshot>", line 3, in <module>\n'
        "    1 / 0\n"
        "    ~~^~~\n"
        "ZeroDivisionError: division by zero"
    )
    assert list(scratch.iterdir()) == []


def test_a_syntax_error_fails_naming_the_line(scratch):
    outcome = oneshot_run(code="print(1)\nprint(\n", scratch_dir=scratch)
    assert outcome.ok is False
    assert outcome.result == ""
    assert outcome.error is not None
    assert outcome.error.startswith('exception: File "<oneshot>", line 2')
    assert outcome.error.endswith("SyntaxError: '(' was never closed")


def test_an_endless_loop_is_killed_at_its_timeout(scratch):
    # given a program that never ends and prints before looping
    code = "print('started', flush=True)\nwhile True:\n    pass\n"
    # when it runs with a 1 s limit
    outcome = oneshot_run(code=code, timeout_s=1.0, scratch_dir=scratch)
    # then it was killed and reported as a timeout, with what it printed so far
    assert outcome.ok is False
    assert outcome.error == "timeout: the program ran longer than 1 s and was killed"
    assert outcome.result == "started"
    assert list(scratch.iterdir()) == []


def test_the_sandbox_has_no_network(scratch):
    # given that PostgreSQL listens on 127.0.0.1:5432 of the host
    with socket.create_connection(("127.0.0.1", 5432), timeout=5):
        pass
    # when a oneshot program tries to reach it, an outside address and a host name
    code = (
        "import socket\n"
        "for target in [('127.0.0.1', 5432), ('1.1.1.1', 443), ('pypi.org', 443)]:\n"
        "    try:\n"
        "        socket.create_connection(target, timeout=2).close()\n"
        "        print(target[0], 'connected')\n"
        "    except OSError as exc:\n"
        "        print(target[0], type(exc).__name__)\n"
    )
    outcome = oneshot_run(code=code, scratch_dir=scratch)
    # then none of them can be reached from inside
    assert outcome.ok is True
    assert outcome.result == (
        "127.0.0.1 ConnectionRefusedError\n1.1.1.1 OSError\npypi.org gaierror"
    )


def test_the_program_sees_no_host_environment_and_an_empty_workspace(scratch):
    code = (
        "import os\n"
        "print(sorted(k for k in os.environ if k not in ('PATH', 'HOME', 'LANG', 'TMPDIR')))\n"
        "print(os.getcwd(), os.listdir('.'))\n"
    )
    outcome = oneshot_run(code=code, scratch_dir=scratch)
    assert outcome.ok is True
    assert outcome.result == "[]\n/workspace []"


def test_files_the_program_writes_are_removed_with_its_workspace(scratch):
    # given a program that writes into its workspace and /tmp, then fails
    code = (
        "open('out.txt', 'w').write('x' * 1000)\n"
        "import os; os.makedirs('deep/er', exist_ok=True); open('deep/er/f', 'w').write('y')\n"
        "open('/tmp/t', 'w').write('z')\n"
        "print(sorted(os.listdir('.')))\n"
        "raise RuntimeError('after writing')\n"
    )
    # when it runs
    outcome = oneshot_run(code=code, scratch_dir=scratch)
    # then the files existed during the call, and nothing is left in the scratch directory
    assert outcome.result == "['deep', 'out.txt']"
    assert outcome.error is not None
    assert outcome.error.endswith("RuntimeError: after writing")
    assert list(scratch.iterdir()) == []


def test_output_is_capped_at_32_kilobytes(scratch):
    outcome = oneshot_run(code="print('x' * 100_000)", scratch_dir=scratch)
    assert outcome.ok is True
    assert outcome.result == "x" * 32 * 1024 + "\n[output truncated at 32768 bytes]"


def test_a_nonzero_exit_without_exception_is_reported_with_its_status(scratch):
    outcome = oneshot_run(code="import sys\nprint('partial')\nsys.exit(3)", scratch_dir=scratch)
    assert outcome == OneshotResult(
        ok=False,
        result="partial",
        duration_ms=outcome.duration_ms,
        error="exit_nonzero: the program exited with status 3",
    )


@pytest.mark.parametrize(
    ("timeout_s", "message"),
    [
        (6, r"timeout_s: 6 s is above the oneshot limit of 5 s \(5000 ms\)"),
        (5.5, r"timeout_s: 5.5 s is above the oneshot limit of 5 s \(5000 ms\)"),
        (0, r"timeout_s: 0 must be more than 0 s"),
        (-1.0, r"timeout_s: -1.0 must be more than 0 s"),
        (math.nan, r"timeout_s: nan must be more than 0 s"),
        (True, r"timeout_s: must be a number of seconds"),
        ("5", r"timeout_s: must be a number of seconds"),
    ],
)
def test_a_timeout_outside_the_oneshot_rule_is_refused_before_anything_runs(
    timeout_s, message, scratch
):
    # given a program that would leave a mark if it ran
    marker = scratch.parent / "ran"
    # when it is requested with a timeout the rule does not allow
    with pytest.raises(InvalidRunParams, match=message) as raised:
        oneshot_run(code=f"open({str(marker)!r}, 'w')", timeout_s=timeout_s, scratch_dir=scratch)
    # then it is refused naming the field, and nothing was created
    assert raised.value.details == {"field": "timeout_s"}
    assert not marker.exists()
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("", "code: must be a non-empty Python program"),
        ("  \n", "code: must be a non-empty Python program"),
        ("#" * 1_000_001, "code: 1000001 characters is over the oneshot limit of 1000000"),
    ],
)
def test_an_empty_or_oversized_program_is_refused(code, message, scratch):
    with pytest.raises(InvalidRunParams, match=message):
        oneshot_run(code=code, scratch_dir=scratch)
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    ("backend", "error_start"),
    [
        (
            "local",
            "sandbox_error: the 'local' sandbox backend runs commands without any isolation",
        ),
        ("teleport", "sandbox_error: unknown sandbox backend 'teleport'"),
    ],
)
def test_a_sandbox_that_cannot_start_fails_the_call_and_nothing_runs(
    backend, error_start, settings, scratch
):
    # given a sandbox backend that cannot be used (the unisolated one is switched off)
    settings.SANDBOX_BACKEND = backend
    settings.SANDBOX_ALLOW_LOCAL = False
    marker = scratch.parent / "ran-unsandboxed"
    # when a program that would leave a mark on the host is run
    outcome = oneshot_run(code=f"open({str(marker)!r}, 'w')", scratch_dir=scratch)
    # then the call failed as a sandbox error and the program never ran anywhere
    assert outcome.ok is False
    assert outcome.result == ""
    assert outcome.error is not None
    assert outcome.error.startswith(error_start)
    assert not marker.exists()
    assert list(scratch.iterdir()) == []


def test_a_scratch_directory_that_does_not_exist_is_a_sandbox_error(tmp_path):
    outcome = oneshot_run(code="1", scratch_dir=tmp_path / "missing")
    assert outcome.ok is False
    assert outcome.error is not None
    assert outcome.error.startswith("sandbox_error: [Errno 2] No such file or directory")


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_both_isolating_backends_compute_without_network_and_clean_up(backend, settings, scratch):
    # given the configured backend is one of the isolating ones
    settings.SANDBOX_BACKEND = backend
    code = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 5432), timeout=2).close()\n"
        "    reached = 'connected'\n"
        "except OSError as exc:\n"
        "    reached = type(exc).__name__\n"
        "open('left.txt', 'w').write('x')\n"
        "(sum(range(10)), reached)\n"
    )
    # when a oneshot runs there
    outcome = oneshot_run(code=code, scratch_dir=scratch)
    # then it computed, reached nothing, and left nothing
    assert (outcome.ok, outcome.result, outcome.error) == (
        True,
        "(45, 'ConnectionRefusedError')",
        None,
    )
    assert list(scratch.iterdir()) == []
