"""Test-only crash points: SIGKILL the worker process at a named boundary of a tool call.

Inert unless the environment variable MOTOR_TEST_CRASH_AT is set, which only the worker-process
tests do (never set it anywhere else). Its value is ``<boundary>:<marker file>``: the first time
the process reaches `boundary` it creates the marker file and kills itself with SIGKILL, exactly
as an OOM killer or a lost host would; once the marker exists the point is inert, so the
redelivered slice gets through. The boundaries are those the durability rules name:

* ``before_step``      – the model answered; the Step row is not written yet (nor the reply,
  when the call's intent is written with it, which is the case for any call that runs at once)
* ``after_intent``     – the Step row (intent) is committed, the call has not started
* ``after_execution``  – the call finished, its result is not recorded yet
* ``after_commit``     – the result is committed, the slice has not finished

(A kill *during* execution needs no hook: the tests kill the worker from outside while the call
blocks.)
"""

from __future__ import annotations

import os
import signal

BOUNDARIES = ("before_step", "after_intent", "after_execution", "after_commit")


def crash_point(boundary: str) -> None:
    """Kill this process at `boundary` when MOTOR_TEST_CRASH_AT asks for it (once)."""
    setting = os.environ.get("MOTOR_TEST_CRASH_AT")
    if not setting:
        return
    wanted, _, marker = setting.partition(":")
    if wanted != boundary or not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
