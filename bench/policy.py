"""Policy engine costs: the decision and the audit write per tool call against bench.motor's
per-iteration orchestration overhead measured in the same run, and the audit export.

Run by hand (root, on the machine with PostgreSQL, Redis and bwrap):

    uv run python -m bench.policy                     # both parts
    uv run python -m bench.policy --parts 1           # only the per-call cost
    uv run python -m bench.policy --rows 1000000      # export size of part 2 (default 1,000,000)

Part 1 measures, in one process and one database: bench.motor part 1's orchestration overhead
per iteration (real workers, the stub LLM, one read per iteration; the engine is wired, so this
is the "after"), then what the policy engine adds to one call — `run_policy` once per slice
(amortised over the slice's calls), `decide`, and the audit row's INSERT inside an open
transaction (as wired: the row is part of the write that records the call's result) and, for
comparison, in a transaction of its own. "Before" is the overhead minus what is added as wired;
the ratios against the 10 % target are printed for both.

Part 2 fills the audit table with `--rows` rows (INSERT … SELECT generate_series), then runs
`manage.py export_audit --format jsonl` in a child process twice — over a tenth of the rows and
over all of them — and reports rows/s and the child's peak RSS: constant memory means the two
peaks are alike.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.motor import (  # noqa: E402 - the path is set first
    Env,
    environment,
    median,
    overhead_samples,
    p95,
    parse_shape,
    say,
    start_run,
    start_workers,
    stop_workers,
)


def _timed(body: Any, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        body()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def part1(env: Env, n: int, repeats: int, shape: str) -> list[str]:
    from django.db import transaction

    from runs.audit import tool_audit_row
    from runs.models import MotorRun
    from runs.policy_gate import call_facts, decide_call, run_policy

    pool, processes, concurrency = parse_shape(shape)
    start_workers(env, pool=pool, processes=processes, concurrency=concurrency)
    say(f"measuring: bench.motor part 1 overhead, {repeats} runs of {n} iterations ...")
    overhead, _tools, note = overhead_samples(env, n, repeats)
    stop_workers(env)

    run = MotorRun.objects.select_related("agent").get(
        pk=start_run(env, "policy", reads=0, iterations=1)
    )
    arguments = {"path": "notes.txt"}
    result = {"ok": True, "output": "x" * 200, "duration_ms": 1}
    standing = run_policy(run)
    samples = 2000
    say("measuring: run_policy, decide and the audit INSERT ...")
    per_slice = _timed(lambda: run_policy(run), 200)
    decide_ms = _timed(lambda: decide_call(standing, "read", arguments), samples)

    def audit_row() -> None:
        tool_audit_row(
            call_facts(standing, run_id=run.pk, attempt=1, iteration=1, call_index=0, actor="b"),
            tool="read",
            arguments=arguments,
            result=result,
            decision=decide_call(standing, "read", arguments).rule,
            approval_required=False,
        ).save(force_insert=True)

    # The row inside an open transaction (as wired: part of the result's write) and, for
    # comparison, in a transaction of its own.
    with transaction.atomic():
        audit_ms = _timed(audit_row, 500)

    def audit_alone() -> None:
        with transaction.atomic():
            audit_row()

    alone_ms = _timed(audit_alone, 200)
    ov = median(overhead) or float("nan")
    # a slice of bench.motor part 1 makes n - 1 calls: run_policy once, amortised over them
    engine = (median(per_slice) or 0) / max(1, n - 1) + (median(decide_ms) or 0)
    # as wired, a call's row is part of the write that records its result: one more INSERT in
    # that statement or transaction, no commit of its own
    as_wired = engine + (median(audit_ms) or 0)
    alone = engine + (median(alone_ms) or 0)
    # the measured overhead already contains the wired engine: "before" is overhead - as_wired
    before = ov - as_wired
    lines = [
        f"Part 1 - what the policy engine adds per call, worker {shape}",
        f"  {'measurement':<58} {'n':>5} {'median ms':>10} {'p95 ms':>9}",
    ]
    for label, values in (
        (f"orchestration overhead per iteration ({repeats} runs x {n - 1})", overhead),
        ("run_policy, a run without a skill (once per slice)", per_slice),
        ("decide (one call)", decide_ms),
        ("audit row INSERT inside an open transaction (one call, as wired)", audit_ms),
        ("audit row in a transaction of its own (one call, for comparison)", alone_ms),
    ):
        lines.append(
            f"  {label:<58} {len(values):>5} {median(values) or 0:>10.3f} {p95(values) or 0:>9.3f}"
        )
    if note:
        lines.append(f"  note: {note}")
    for label, added in (("as wired", as_wired), ("if the row had a commit of its own", alone)):
        ratio = added / before
        lines.append(
            f"  added per call ({label}) / overhead before: {added:.3f} / {before:.3f} = "
            f"{ratio:.3f}  target <= 0.10  {'met' if ratio <= 0.10 else 'NOT met'}"
        )
    return lines


FILL = """
INSERT INTO runs_toolcallaudit (run_ref, attempt, iteration, call_index, agent_ref_id,
    agent_name, skill_name, skill_version_hash, tool, inputs, output_summary, success,
    error_code, duration_ms, decision, approval_required, approved_by, trust_level, actor,
    created_at)
SELECT 'run_bench', 1, g, 0, 1, 'bench', 'weather', '', 'read',
    '{"path": "notes/2026/report.txt"}'::jsonb, repeat('x', 200), true, '', 3,
    'approved_skill', false, '', 'supervised_auto', 'worker:bench',
    now() + g * interval '1 microsecond'
FROM generate_series(1, %s) AS g
"""


def _export(env: Env, since: str | None) -> tuple[float, int, int]:
    """(seconds spent streaming as the command reports it, rows exported, peak RSS KiB of that
    child) for the rows created since `since`."""
    out = env.data_dir / "export.jsonl"
    started = time.perf_counter()
    window = ["--since", since] if since else []
    child = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "export_audit",
            *window,
            "--format",
            "jsonl",
            "--output",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert child.stderr is not None
    report = child.stderr.read().decode()
    _pid, status, usage = os.wait4(child.pid, 0)
    child.returncode = status
    found = re.search(r"in ([0-9.]+) s", report)
    seconds = float(found.group(1)) if found else time.perf_counter() - started
    if status != 0:
        raise RuntimeError(f"export_audit exited with status {status}")
    with out.open("rb") as f:
        count = sum(1 for _ in f)
    out.unlink()
    return seconds, count, usage.ru_maxrss


def part2(env: Env, rows: int) -> list[str]:
    from django.db import connection

    say(f"filling the audit table with {rows} rows ...")
    with connection.cursor() as cursor:
        cursor.execute(FILL, [rows])
    lines = [
        f"Part 2 - export_audit --format jsonl (child process), {rows} rows filled",
        f"  {'rows exported':>14} {'seconds':>9} {'rows/s':>9} {'peak RSS MiB':>13}",
    ]
    from runs.audit_models import ToolCallAudit

    ordered = ToolCallAudit.objects.order_by("id").values_list("created_at", flat=True)
    total = ToolCallAudit.objects.count()
    say("exporting nothing (the command's own footprint) ...")
    _, _, base_peak = _export(env, "2999-01-01")
    lines.append(f"  {0:>14} {0:>9.1f} {'-':>9} {base_peak / 1024:>13.1f}")
    for share in (10, 1):
        say(f"exporting 1/{share} of the rows ...")
        # the filled rows are the newest (timestamps after every earlier row, in id order)
        since = ordered.reverse()[rows // share - 1].isoformat() if share > 1 else None
        seconds, count, peak = _export(env, since)
        rate = count / max(1e-9, seconds)
        lines.append(f"  {count:>14} {seconds:>9.1f} {rate:>9.0f} {peak / 1024:>13.1f}")
    lines.append(f"  ({total} rows in the table: the filled ones and part 1's)")
    lines.append(
        "  (seconds: the streaming as the command reports it, without Django's start-up; "
        "constant memory: the peak RSS of the full export is that of the tenth and of none)"
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--parts", default="1,2")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", default="threads:1x8")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--redis-db", type=int, default=13)
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    with environment(args.redis_db) as env:
        if "1" in parts:
            print(
                "\n".join(["", *part1(env, args.iterations, args.repeats, args.worker)]), flush=True
            )
        if "2" in parts:
            print("\n".join(["", *part2(env, args.rows)]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
