"""What follow_run reads from the API: each step's output excerpt in the run's details (shown on
its step line), and the followed agent's energy found on whichever page of the agents list it
is. The follower talks HTTP to the real WSGI application (httpx's WSGI transport)."""

from __future__ import annotations

import io

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.handlers.wsgi import WSGIHandler

from cognition.models import Agent
from cognition.ops.follow import Follower, step_line
from cognition.services import agent_issue_token, personal_token_create
from runs.services import run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.runs.helpers import drive, new_workspace

# transactional: the WSGI handler closes its database connection after each request
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_run_queue")]

LONG = "word " * 60  # 300 characters


def api(token: str) -> httpx.Client:
    return httpx.Client(
        transport=httpx.WSGITransport(app=WSGIHandler()),
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {token}"},
    )


def test_the_run_detail_gives_each_step_an_excerpt_of_its_output(agent, scripted_llm) -> None:
    # given a run that wrote a 300-character file, read it back, and read a missing one
    run_id = run_start(
        agent_id=agent.pk,
        task="Write and read",
        tools=["write", "read"],
        workspace=new_workspace(),
        actor="t",
    )["run_id"]
    scripted_llm.add(
        reply_tools(tool_call("write", {"path": "a.txt", "content": LONG}, call_id="w")),
        reply_tools(
            tool_call("read", {"path": "a.txt"}, call_id="r"),
            tool_call("read", {"path": "missing.txt"}, call_id="m"),
        ),
        reply_text("Done."),
    )
    drive(run_id, scripted_llm.client())
    # when its details are read through the API
    token = agent_issue_token(agent=agent, actor=agent.owner).raw
    with api(token) as client:
        steps = client.get(f"/api/v1/runs/{run_id}/").json()["steps"]
    # then each step carries the start of its output, cut at 200 characters with "…"
    write, read, missing = (step["output_excerpt"] for step in steps)
    assert write == "wrote 300 bytes to a.txt"
    assert read == "word " * 39 + "word…"  # whitespace folded: 199 characters and the mark
    assert len(read) == 200
    assert missing == "missing.txt: no such file"
    # and follow_run shows it on the step line
    line = step_line(steps[0])
    assert line.startswith('[attempt 1 · iteration 1] write(path="a.txt", content="word word')
    assert line.endswith(' ms → ok: "wrote 300 bytes to a.txt"')
    assert step_line(steps[2]).endswith(' ms → error not_found: "missing.txt: no such file"')


def test_a_step_in_flight_shows_no_output() -> None:
    step = {
        "attempt_number": 1,
        "iteration": 2,
        "tool": "bash",
        "arguments": {"command": "sleep 5"},
        "state": "intent",
        "output_excerpt": "",
        "duration_ms": None,
    }
    assert step_line(step) == '[attempt 1 · iteration 2] bash(command="sleep 5") → …running'


def test_the_followed_agents_energy_is_found_on_any_page_of_the_agents_list() -> None:
    # given a person owning five agents, listed two to a page, the followed one on the last page
    owner = get_user_model().objects.create_user(username="olivia", password="x")
    for name in ("ant", "bee", "cat", "dog"):
        Agent.objects.create(name=name, owner=owner, energy=1.0)
    followed = Agent.objects.create(name="zebra", owner=owner, energy=0.37)
    token = personal_token_create(user=owner, name="cli", actor=owner).raw
    with api(token) as client:
        follower = Follower(
            client=client,
            run_id="run_000000000000",
            out=io.StringIO(),
            stdin=None,
            agent="zebra",
            agent_page_size=2,
        )
        # when follow_run reads the agent's energy, by name and by id
        by_name = follower.energy()
        follower.agent = str(followed.pk)
        by_id = follower.energy()
        # then it is the agent's level, read from the third page
        follower.agent = "nobody"
        missing = follower.energy()
    assert by_name == by_id == pytest.approx(0.37, abs=0.01)
    assert missing is None
