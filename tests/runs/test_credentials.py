"""A credential reaches the tool call as an environment variable and is found nowhere else."""

from __future__ import annotations

import logging

import pytest
from django.core import serializers

from runs.models import Attempt, MotorRun, RunEvent, Signal, Step
from runs.mutex import redis_client
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.credential_resolver import SECRET_VALUE
from tests.runs.helpers import drive

pytestmark = pytest.mark.django_db


def _redis_dump() -> str:
    client = redis_client()
    parts: list[str] = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        if kind == "string":
            parts.append(repr(client.get(key)))
        elif kind == "list":
            parts.append(repr(client.lrange(key, 0, -1)))
        elif kind == "hash":
            parts.append(repr(client.hgetall(key)))
        elif kind in ("set", "zset"):
            parts.append(
                repr(client.zrange(key, 0, -1) if kind == "zset" else client.smembers(key))
            )
    return "\n".join(parts)


def test_a_used_credential_appears_in_no_row_signal_log_or_redis_key(
    agent, scripted_llm, settings, tmp_path, caplog
):
    # given a run granted `code` and the credential api_token, resolved by the vault hook
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.resolve"
    caplog.set_level(logging.DEBUG)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = run_start(
        agent_id=agent.pk,
        task="Check the token",
        tools=["code"],
        credential_names=["api_token"],
        workspace=str(workspace),
        actor="t",
    )["run_id"]
    program = "import os\nv = os.environ['api_token']\nprint(len(v), v)\n"
    scripted_llm.add(reply_tools(tool_call("code", {"code": program})), reply_text("Checked."))
    # when the run uses it
    drive(run_id, scripted_llm.client())
    # then the call saw the value (its length), but only the placeholder came back
    step = Step.objects.get(attempt__run_id=run_id)
    assert step.result["ok"] is True
    assert step.result["output"].strip() == f"{len(SECRET_VALUE)} <credential:api_token>"
    # and the value is in no database row of the runtime, no LLM request, no log and no Redis key
    rows = serializers.serialize(
        "json",
        [
            *MotorRun.objects.filter(pk=run_id),
            *Attempt.objects.filter(run_id=run_id),
            *Step.objects.filter(attempt__run_id=run_id),
            *Signal.objects.filter(run_id=run_id),
            *RunEvent.objects.filter(run_id=run_id),
        ],
    )
    assert "<credential:api_token>" in rows
    assert SECRET_VALUE not in rows
    assert SECRET_VALUE not in repr(scripted_llm.requests)
    assert SECRET_VALUE not in caplog.text
    assert SECRET_VALUE not in _redis_dump()
