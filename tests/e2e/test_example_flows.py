"""The two example flows of seed 001 ("Phase 1: Hands"): an asynchronous analysis the brain
hands off and reports on when woken, and a run that asks the user a question mid-way, is
answered through the conversation and finishes after fixing its own script.

The user's files live on a file host (the test upstream); the run copies them into its
workspace with curl, as seed 001 describes for user files."""

from __future__ import annotations

import json

import pytest

from cognition.models import Conversation
from runs.models import MotorRun, RunStatus, Signal, Step
from skills.models import Skill
from tests.cognition.conftest import World
from tests.e2e.conftest import Stack
from tests.e2e.support import brain_calls, last_id, post, shown, tool_results, wait_handled
from tests.fixtures.llm import reply_text, reply_tools, tool_call
from tests.fixtures.upstream import Answer

pytestmark = [pytest.mark.slow]

FILES = "http://files.example.com"
PORTFOLIO = "symbol,shares,price\nAAPL,10,190\nMSFT,3,410\nVTI,20,240\nBND,30,72\nGLD,2,185\n"
STRATEGY = (
    "# Strategy\n\nTarget allocation (share of portfolio value):\n\n"
    "- AAPL: 15%\n- MSFT: 15%\n- VTI: 40%\n- BND: 25%\n- GLD: 5%\n"
)
ANALYSIS = """\
import csv, re
rows = list(csv.DictReader(open("portfolio.csv")))
targets = {m[0]: float(m[1]) for m in re.findall(r"- (\\w+): (\\d+)%", open("strategy.md").read())}
value = {r["symbol"]: int(r["shares"]) * float(r["price"]) for r in rows}
total = sum(value.values())
for symbol, target in targets.items():
    share = 100 * value[symbol] / total
    if share < target:
        print(f"{symbol} {share:.1f}% < {target:.0f}%")
"""


def test_example_flow_portfolio_analysis_runs_async_and_is_reported(
    stack: Stack, world: World, session_client
) -> None:
    # given olivia's portfolio and strategy on her file host
    stack.upstream.route("files.example.com", "/portfolio.csv", Answer(body=PORTFOLIO))
    stack.upstream.route("files.example.com", "/strategy.md", Answer(body=STRATEGY))
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    task = (
        f"Read portfolio.csv ({FILES}/portfolio.csv), compare it against strategy.md "
        f"({FILES}/strategy.md) and report the positions below target."
    )
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": task,
                    "tools": ["code", "filesystem", "shell"],
                    "domains": ["files.example.com"],
                },
            )
        ),
        reply_text("Working on your portfolio analysis. I'll let you know when it's done."),
    )
    download = (
        f"curl -sS -o portfolio.csv {FILES}/portfolio.csv && "
        f"curl -sS -o strategy.md {FILES}/strategy.md && echo fetched"
    )
    stack.motor.add(
        reply_tools(tool_call("bash", {"command": download})),
        reply_tools(tool_call("read", {"path": "portfolio.csv"})),
        reply_tools(tool_call("read", {"path": "strategy.md"})),
        reply_tools(tool_call("code", {"code": ANALYSIS})),
        reply_text(
            "3 positions are below target: MSFT 11.8% < 15%, BND 20.7% < 25%, GLD 3.5% < 5%."
        ),
    )
    report = (
        "Your portfolio analysis is done. 3 positions are below target: MSFT (11.8% vs 15%), "
        "BND (20.7% vs 25%) and GLD (3.5% vs 5%)."
    )
    stack.fast.add(reply_text(report))

    # when olivia asks, the brain's turn ends at once with the run started
    added = post(
        olivia, chat, "Analyze my portfolio CSV and tell me which positions are below target"
    )
    assert [(m["role"], m["text"]) for m in added if m["role"] != "tool"] == [
        ("user", "Analyze my portfolio CSV and tell me which positions are below target"),
        ("assistant", ""),
        ("assistant", "Working on your portfolio analysis. I'll let you know when it's done."),
    ]
    run_id = added[2]["tool_result"]["result"]["run_id"]
    assert added[2]["tool_result"]["result"]["status"] == "created"

    # then the run works on its own and the brain is woken by its result
    wait_handled(stack, run_id, "completed")
    run = MotorRun.objects.get(pk=run_id)
    assert (run.status, run.result["ok"], run.result["skills"]["created"]) == (
        RunStatus.COMPLETED,
        True,
        [],
    )
    steps = list(
        Step.objects.filter(attempt__run=run)
        .order_by("iteration", "call_index")
        .values_list("tool", "result__ok", "result__output")
    )
    assert [(tool, ok) for tool, ok, _ in steps] == [
        ("bash", True),
        ("read", True),
        ("read", True),
        ("code", True),
    ]
    assert steps[1][2] == PORTFOLIO
    # the deviations were computed in the sandbox from the downloaded files
    assert steps[3][2] == "MSFT 11.8% < 15%\nBND 20.7% < 25%\nGLD 3.5% < 5%\n"
    assert stack.upstream.requests("files.example.com") == [
        "GET /portfolio.csv",
        "GET /strategy.md",
    ]
    [signal] = Signal.objects.filter(run_id=run_id)
    assert signal.payload["status"] == "completed"
    assert shown(chat, since=added[-1]["id"]) == [
        (
            "event",
            "motor_result",
            f"Run {run_id} completed: 3 positions are below target: MSFT 11.8% < 15%, "
            "BND 20.7% < 25%, GLD 3.5% < 5%.",
        ),
        ("assistant", "", report),
    ]
    assert Skill.objects.count() == 0
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}


ORDERS_1 = [{"id": 1, "date": "2026-11-01", "amount": 12.5}, {"id": 2, "amount": 7}]
ORDERS_2 = [{"id": 3, "date": "2026-11-03", "amount": 30}]
USERS = [{"name": "Ann", "email": "ann@example.com"}, {"name": "Bo", "email": "bo@example.com"}]
DATA = {"orders-1.json": ORDERS_1, "orders-2.json": ORDERS_2, "users.json": USERS}


def _converter(*, fixed: bool) -> str:
    """The script the run writes: its first version assumes every record has a date."""
    date = 'r.get("date", "")' if fixed else 'r["date"]'
    return f"""\
import csv, glob, json, os
os.makedirs("artifacts", exist_ok=True)
groups = {{}}
for path in sorted(glob.glob("data/*.json")):
    for r in json.load(open(path)):
        groups.setdefault(tuple(sorted(r)) if "email" in r else "orders", []).append(r)
for key, records in groups.items():
    if key == "orders":
        name, fields = "orders", ["id", "date", "amount"]
        records = [{{"id": r["id"], "date": {date}, "amount": r["amount"]}} for r in records]
    else:
        name, fields = "users", ["name", "email"]
    with open(f"artifacts/{{name}}.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(records)
    print(f"{{name}}.csv: {{len(records)}} rows")
"""


def test_example_flow_ask_user_json_to_csv_script(
    stack: Stack, world: World, session_client
) -> None:
    # given three JSON files of two schemas on olivia's file host
    for name, records in DATA.items():
        stack.upstream.route("files.example.com", f"/data/{name}", Answer(body=json.dumps(records)))
    chat = Conversation.objects.create(agent=world.alpha, user=world.olivia)
    olivia = session_client(world.olivia)
    task = (
        f"Write a script that processes all JSON files in {FILES}/data/ (orders-1.json, "
        "orders-2.json, users.json) and converts them to CSV under artifacts/."
    )
    question = (
        "Found 3 JSON files with 2 different schemas. Should I: (a) create a separate CSV per "
        "schema, or (b) merge into one CSV with nullable columns?"
    )
    stack.fast.add(
        reply_tools(
            tool_call(
                "core_act",
                {
                    "mode": "agentic",
                    "task": task,
                    "tools": ["code", "filesystem", "shell"],
                    "domains": ["files.example.com"],
                },
            )
        ),
        reply_text("Working on the script."),
        # the awaiting_input wake-up relays the question
        reply_text(
            "The script found 3 JSON files with 2 schemas. Should I create separate CSVs or "
            "merge them into one?"
        ),
    )
    download = " ".join(
        ["curl -sS --create-dirs"] + [f"-o data/{n} {FILES}/data/{n}" for n in DATA]
    )
    stack.motor.add(
        reply_tools(tool_call("bash", {"command": download})),
        reply_tools(tool_call("list", {"path": "data"})),
        reply_tools(tool_call("ask_user", {"question": question})),
    )

    # when olivia asks, the run downloads the files, looks at them and asks
    added = post(
        olivia, chat, "Write a script that processes all JSON files in /data and converts to CSV"
    )
    run_id = added[2]["tool_result"]["result"]["run_id"]
    wait_handled(stack, run_id, "awaiting_input")

    # then the question reached olivia and the conversation waits for her answer
    run = MotorRun.objects.get(pk=run_id)
    assert run.status == RunStatus.AWAITING_INPUT
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id, chat.pending_question) == (
        "awaiting_answer",
        run_id,
        question,
    )
    listing = Step.objects.get(attempt__run=run, tool="list").result
    assert listing["ok"] is True
    assert all(name in listing["output"] for name in DATA)
    assert shown(chat, since=added[-1]["id"]) == [
        ("event", "motor_result", f"Run {run_id} asks: {question}"),
        (
            "assistant",
            "",
            "The script found 3 JSON files with 2 schemas. Should I create separate CSVs or "
            "merge them into one?",
        ),
    ]
    # the pending question is in the brain's context for her next message
    mark = last_id(chat)
    answer = "Create a separate CSV per schema"
    stack.fast.add(
        reply_tools(
            tool_call("core_task", {"action": "respond", "run_id": run_id, "answer": answer})
        ),
        reply_text("Got it, continuing with separate CSVs."),
        reply_text("Done! Created 2 CSV files: orders.csv (3 rows) and users.csv (2 rows)."),
    )
    run_script = 'import runpy; runpy.run_path("convert.py")'
    stack.motor.add(
        reply_tools(tool_call("write", {"path": "convert.py", "content": _converter(fixed=False)})),
        reply_tools(tool_call("code", {"code": run_script})),
        reply_tools(tool_call("write", {"path": "convert.py", "content": _converter(fixed=True)})),
        reply_tools(tool_call("code", {"code": run_script})),
        reply_text("Created 2 CSV files: orders.csv (3 rows), users.csv (2 rows)."),
    )

    # when olivia answers
    post(olivia, chat, "Separate CSVs please")

    # then the brain passed the answer to the run, which resumed, fixed its script and finished
    wait_handled(stack, run_id, "completed")
    user_prompt = stack.fast.requests[3]["messages"][0]["content"]
    assert f'<pending_motor_question run_id="{run_id}">' in user_prompt
    assert [c[:2] for c in brain_calls(chat, since=mark)] == [("user_message", "core_task")]
    [(_, responded)] = tool_results(chat, since=mark)
    assert responded["ok"] is True
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    # every file the run wrote is an artifact: the CSVs, its script and the downloaded inputs
    assert [item["path"] for item in run.result["artifacts"]] == [
        "artifacts/orders.csv",
        "artifacts/users.csv",
        "convert.py",
        "data/orders-1.json",
        "data/orders-2.json",
        "data/users.json",
    ]
    assert run.result["artifacts"][0]["mime"] == "text/csv"
    steps = list(
        Step.objects.filter(attempt__run=run)
        .order_by("iteration", "call_index")
        .values_list("tool", "result__ok")
    )
    assert steps == [
        ("bash", True),
        ("list", True),
        ("ask_user", True),
        ("write", True),
        ("code", False),
        ("write", True),
        ("code", True),
    ]
    answered = Step.objects.get(attempt__run=run, tool="ask_user").result
    assert (answered["output"], answered["provenance"]) == (answer, "user")
    failed_run, good_run = Step.objects.filter(attempt__run=run, tool="code").order_by("iteration")
    assert "KeyError: 'date'" in failed_run.result["output"]
    assert good_run.result["output"] == "orders.csv: 3 rows\nusers.csv: 2 rows\n"
    chat.refresh_from_db()
    assert (chat.status, chat.pending_run_id) == ("idle", "")
    assert shown(chat, since=mark) == [
        ("user", "", "Separate CSVs please"),
        ("assistant", "", "Got it, continuing with separate CSVs."),
        (
            "event",
            "motor_result",
            f"Run {run_id} completed: Created 2 CSV files: orders.csv (3 rows), users.csv "
            "(2 rows).",
        ),
        (
            "assistant",
            "",
            "Done! Created 2 CSV files: orders.csv (3 rows) and users.csv (2 rows).",
        ),
    ]
    assert list(Signal.objects.filter(run_id=run_id).values_list("payload__status", flat=True)) == [
        "awaiting_input",
        "completed",
    ]
    assert stack.scripts_spent() == {"fast": 0, "smart": 0, "motor": 0}
