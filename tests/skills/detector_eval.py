"""Detection and false-positive rates of the review's suspicious-pattern check.

The evaluation set is ``data/detector_eval/``: ``malicious/`` holds skills reconstructed from
public write-ups of malicious agent skills (hosts and addresses moved to reserved ones),
``benign/`` ordinary skills, hard cases included. A skill counts as flagged when the review
gives it at least one suspicious finding of severity warning or danger.

Print the rule table and the results: ``uv run python -m tests.skills.detector_eval``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skills.bundle import review_bundle
from skills.bundle.malware_rules import RULES

EVAL_DIR = Path(__file__).parent / "data" / "detector_eval"


@dataclass(frozen=True)
class Outcome:
    kind: str  # "malicious" or "benign"
    name: str
    rules: tuple[str, ...]  # families of the warning/danger findings

    @property
    def flagged(self) -> bool:
        return bool(self.rules)


def load_skill(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def evaluate(kind: str) -> list[Outcome]:
    outcomes = []
    for directory in sorted((EVAL_DIR / kind).iterdir()):
        facts = review_bundle(load_skill(directory))
        rules = sorted({f.rule for f in facts.suspicious if f.severity in ("warning", "danger")})
        outcomes.append(Outcome(kind, directory.name, tuple(rules)))
    return outcomes


def rate(outcomes: list[Outcome]) -> float:
    return sum(o.flagged for o in outcomes) / len(outcomes)


def print_rules() -> None:
    width = max(len(rule.id) for rule in RULES)
    for rule in RULES:
        examples = f"{len(rule.must_match)} must match, {len(rule.must_not_match)} must not"
        print(f"{rule.id:{width}}  {rule.severity:7}  {rule.catches}  ({examples})")
    print()


def main() -> None:
    print_rules()
    malicious, benign = evaluate("malicious"), evaluate("benign")
    width = max(len(o.name) for o in malicious + benign)
    for outcome in malicious + benign:
        mark = "flagged" if outcome.flagged else "-"
        print(f"{outcome.kind:9}  {outcome.name:{width}}  {mark:7}  {', '.join(outcome.rules)}")
    print()
    print(
        f"malicious flagged: {sum(o.flagged for o in malicious)}/{len(malicious)} "
        f"({rate(malicious):.1%})"
    )
    print(f"benign flagged:    {sum(o.flagged for o in benign)}/{len(benign)} ({rate(benign):.1%})")


if __name__ == "__main__":
    main()
