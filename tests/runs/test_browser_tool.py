"""The `browser` tool in real runs: a scripted model drives Chromium inside the run's session
(bwrap, and docker with the sandbox image's Chromium) against the test upstream's utility portal (tests/fixtures/portal.py) — the seed's
utility-readings flow: log in with a vault credential, read the meters, ask the owner with the
values, submit exactly once, report."""

from __future__ import annotations

import json

import pytest

from runs.models import ApprovalRequest, MotorRun, RunStatus, Step
from runs.services import SliceOutcome, run_approve, run_start
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.portal import CSRF, HOST, INJECTION, serve_portal
from tests.fixtures.upstream import upstream  # noqa: F401 (fixture)
from tests.runs.credential_resolver import SECRET_VALUE
from tests.runs.helpers import drive, new_workspace

pytestmark = [pytest.mark.django_db, pytest.mark.browser, pytest.mark.slow]

PORTAL = f"http://{HOST}"


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def portal(request, upstream, monkeypatch, settings):  # noqa: F811
    """The portal on the test upstream, runs on each isolating backend."""
    monkeypatch.setenv(
        "MOTOR_SANDBOX_EGRESS_HOSTS", f"{HOST}={upstream.ip},evil.test={upstream.ip}"
    )
    settings.MOTOR_CREDENTIAL_RESOLVER = "tests.runs.credential_resolver.resolve"
    settings.SANDBOX_BACKEND = request.param
    upstream.routes_clear()
    serve_portal(upstream)
    yield upstream
    upstream.routes_clear()


def browse(call_id: str, **arguments: object) -> dict:
    return reply_tools(tool_call("browser", arguments, call_id=call_id))


def _start(agent, **extra) -> str:
    return run_start(
        agent_id=agent.pk,
        task="Submit this month's water meter readings",
        tools=["browser"],
        allowed_domains=[HOST],
        credential_names=["portal_password"],
        workspace=new_workspace(),
        actor="test",
        **extra,
    )["run_id"]


def _results(run_id: str) -> dict[str, dict]:
    return {
        step.tool_call_id: step.result
        for step in Step.objects.filter(attempt__run_id=run_id).exclude(tool_call_id="")
    }


SUBMIT = {"action": "click", "ref": "e7", "submit": True}


def test_the_utility_readings_flow_logs_in_asks_and_submits_exactly_once(
    agent, scripted_llm, portal
) -> None:
    # given a run granted only the browser on portal.test, with the portal password in the vault
    run_id = _start(agent, approval_required=True)
    scripted_llm.add(
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("user", action="type", ref="e1", text="tenant67"),
        browse("pass", action="type", ref="e2", text="<credential:portal_password>"),
        browse("login", action="click", ref="e3"),
        browse("leave", action="navigate", url=f"{PORTAL}/leave"),
        browse("back", action="navigate", url=f"{PORTAL}/meters"),
        browse("table", action="extract", ref="e3", format="table"),
        browse("m0", action="type", ref="e4", text="988"),
        browse("m1", action="type", ref="e5", text="415"),
        browse("m2", action="type", ref="e6", text="1304"),
        reply_tools(
            tool_call(
                "request_approval",
                {
                    "tool": "browser",
                    "arguments": SUBMIT,
                    "reason": "Apt 67 cold 985 → 988, Apt 67 hot 412 → 415, Apt 69 cold 1301 → 1304",
                },
                call_id="ask",
            )
        ),
    )
    # when the loop runs, it pauses for the owner with the values
    assert drive(run_id, scripted_llm.client())[-1] is SliceOutcome.PAUSED
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert approval.action == {"tool": "browser", "arguments": SUBMIT}
    assert "985 → 988" in approval.summary
    assert portal.requests(HOST).count("POST /readings") == 0

    # when the owner approves, the model submits and reports
    run_approve(run_id=run_id, approval_id=approval.pk, actor="user:1")
    scripted_llm.add(
        browse("submit", **SUBMIT),
        reply_text("Submitted: Apt 67 cold 988 (+3), hot 415 (+3), Apt 69 cold 1304 (+3)."),
    )
    assert drive(run_id, scripted_llm.client())[-1] is SliceOutcome.FINISHED

    # then the form went in exactly once, with the CSRF token and the session cookie
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED
    log = portal.request_log(HOST)
    posted = [entry for entry in log if entry["line"] == "POST /readings"]
    assert len(posted) == 1
    assert posted[0]["body"] == f"csrf={CSRF}&m0=988&m1=415&m2=1304"
    assert posted[0]["headers"]["cookie"] == "portal_session=s-5521"
    # the vault value reached the portal, and nothing else
    login = [entry for entry in log if entry["line"] == "POST /session"]
    assert login[0]["body"] == f"csrf={CSRF}&username=tenant67&password={SECRET_VALUE}"
    results = _results(run_id)
    stored = json.dumps(results) + json.dumps(
        list(Step.objects.filter(attempt__run_id=run_id).values_list("arguments", flat=True))
    )
    assert SECRET_VALUE not in stored
    assert SECRET_VALUE not in json.dumps(scripted_llm.requests)
    assert "\ne2 textbox Password = ••••••\n" in results["pass"]["output"]
    # the undeclared domain was refused and reported
    assert (results["leave"]["ok"], results["leave"]["error_code"]) == (False, "network_blocked")
    assert "evil.test" in results["leave"]["output"]
    assert portal.requests("evil.test") == []
    # the table came back as data, and the confirmation page after the submit
    assert (
        'data: {"rows": [["Meter", "Last reading"], ["Apt 67 cold water", "985"]'
        in (results["table"]["output"])
    )
    assert "\nh1 Readings received\n" in results["submit"]["output"]
    assert f"idempotency key: {run_id}:" in results["submit"]["output"]
    # every page reached the model marked as untrusted web content, the injection with it
    contents = [
        message["content"]
        for request in scripted_llm.requests
        for message in request["messages"]
        if message.get("role") == "tool"
    ]
    injected = [content for content in contents if INJECTION in content]
    assert injected and all(c.startswith('<untrusted source="web">') for c in injected)
    browsing = Step.objects.filter(attempt__run_id=run_id, tool="browser")
    assert {step.result["provenance"] for step in browsing} == {"web"}


def test_a_submitting_click_in_a_gated_run_waits_for_the_owner(agent, scripted_llm, portal):
    run_id = _start(agent, approval_required=True)
    scripted_llm.add(
        browse("nav", action="navigate", url=f"{PORTAL}/meters"),
        browse("submit", **SUBMIT),
    )
    assert drive(run_id, scripted_llm.client())[-1] is SliceOutcome.PAUSED
    # the read-only navigation ran; the submit is put to the owner and was not clicked
    approval = ApprovalRequest.objects.get(run_id=run_id)
    assert approval.action == {"tool": "browser", "arguments": SUBMIT}
    assert "GET /meters" in portal.requests(HOST)
    assert "POST /readings" not in portal.requests(HOST)


def test_nothing_crosses_from_one_run_to_the_next(agent, scripted_llm, portal):
    # given a first run that logs in (the portal sets its session cookie, sent from then on)
    first = _start(agent)
    scripted_llm.add(
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("pass", action="type", ref="e2", text="<credential:portal_password>"),
        browse("login", action="click", ref="e3"),
        reply_text("Logged in."),
    )
    drive(first, scripted_llm.client())
    meters = [e for e in portal.request_log(HOST) if e["line"] == "GET /meters"]
    assert meters[-1]["headers"]["cookie"] == "portal_session=s-5521"
    # when a second run of the same task opens the portal
    second = _start(agent)
    scripted_llm.add(browse("nav", action="navigate", url=f"{PORTAL}/meters"), reply_text("Done."))
    drive(second, scripted_llm.client())
    # then its browser starts without the first run's cookie
    meters = [e for e in portal.request_log(HOST) if e["line"] == "GET /meters"]
    assert len(meters) == 2
    assert "cookie" not in meters[-1]["headers"]
    assert MotorRun.objects.get(pk=second).status == RunStatus.COMPLETED


def test_two_failed_locates_report_the_vision_check_unavailable_without_a_vision_model(
    agent, scripted_llm, portal, settings
):
    settings.LLM_VISION_MODEL = ""
    run_id = _start(agent)
    scripted_llm.add(
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("miss1", action="click", ref="e99"),
        browse("miss2", action="click", ref="e99"),
        reply_text("Could not find it."),
    )
    drive(run_id, scripted_llm.client())
    results = _results(run_id)
    assert (results["miss1"]["error_code"], results["miss2"]["error_code"]) == (
        "not_found",
        "not_found",
    )
    assert "vision check" not in results["miss1"]["output"]
    assert results["miss2"]["output"].endswith(
        "vision check after 2 failed locates of e99: unavailable, no vision model is configured "
        "(LLM_VISION_MODEL); take a fresh snapshot and choose the element again"
    )


def test_two_failed_locates_ask_the_vision_model_with_a_screenshot(
    agent, scripted_llm, portal, settings, llm_stub_server
):
    # given a vision model behind the OpenAI-compatible endpoint
    settings.LLM_VISION_MODEL = "vision-test"
    settings.LLM_BASE_URL = llm_stub_server.base_url
    llm_stub_server.add(reply_text("The 'Log in' button is below the password field."))
    run_id = _start(agent)
    scripted_llm.add(
        browse("nav", action="navigate", url=f"{PORTAL}/login"),
        browse("pass", action="type", ref="e2", text="<credential:portal_password>"),
        browse("miss1", action="type", ref="e42", text="Log in"),
        browse("miss2", action="type", ref="e42", text="Log in"),
        reply_text("Found it."),
    )
    drive(run_id, scripted_llm.client())
    # then the second miss carries the vision model's answer
    assert _results(run_id)["miss2"]["output"].endswith(
        "vision check after 2 failed locates of e42: "
        "The 'Log in' button is below the password field."
    )
    # and the vision model got one PNG screenshot and the target, and no secret
    (request,) = llm_stub_server.requests
    assert request["model"] == "vision-test"
    text, image = request["messages"][0]["content"]
    assert "'Log in'" in text["text"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    assert SECRET_VALUE not in json.dumps(request)
