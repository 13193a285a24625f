"""The README's first run and the REST walk-through (docs/walkthrough-api.md) work as written:
the curl body each shows starts a run with its tools."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from cognition.services import agent_issue_token
from runs.models import MotorRun, RunStatus
from tests.cognition.core_support import _clean_mutex_keys, workspaces  # noqa: F401 - fixtures
from tests.skills.admin_support import make_agent, make_user

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("workspaces")]


def _run_posts(document: str) -> list[dict]:
    """The JSON bodies of `document`'s curl calls that POST to /api/v1/runs/."""
    text = (ROOT / document).read_text()
    bodies = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for command in block.replace("\\\n", " ").splitlines():
            starts_run = "curl" in command and '/api/v1/runs/"' in command
            words = shlex.split(command) if starts_run else []
            if "-X" in words and words[words.index("-X") + 1] == "POST":
                if any(w.endswith("/api/v1/runs/") for w in words):
                    bodies.append(json.loads(words[words.index("-d") + 1]))
    return bodies


@pytest.mark.parametrize("document", ["README.md", "docs/walkthrough-api.md"])
def test_the_document_shows_how_to_start_a_run_and_its_body_starts_one(document: str) -> None:
    # given the document's example of starting a run
    bodies = _run_posts(document)
    assert len(bodies) == 1, f"{document} shows one curl call that starts a run"
    body = bodies[0]
    # and an agent with a token, as the admin issues it
    agent = make_agent("assistant", owner=make_user("admin"))
    token = agent_issue_token(agent=agent, actor=agent.owner).raw
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    # when that body is posted with the token
    response = client.post("/api/v1/runs/", body, format="json")

    # then a run is created with the task, tools and domains the example names
    assert response.status_code == 201, response.content
    run = MotorRun.objects.get(pk=response.json()["run_id"])
    assert (run.task, run.tools, run.allowed_domains, run.status) == (
        body["task"],
        body["tools"],
        body["domains"],
        RunStatus.CREATED,
    )
    assert body["tools"], "the example grants a tool: a run without tools can only ask"
