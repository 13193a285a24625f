"""The rules of a schedule's fields: a known agent and skill (whose allowed domains the egress
policy accepts), a task text, JSON inputs that match the skill's input schema, exactly one of a crontab and an interval, and a
time zone. A broken rule raises `ScheduleInvalid` naming the field and the rule.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import crontab as celery_crontab

from sandbox import egress
from skills import bundle as bundle_lib
from skills.models import Policy
from skills.toolpolicy.inputs import input_errors

from .errors import CognitionError
from .models import Agent

#: largest interval, seconds (the PositiveIntegerField's range)
MAX_INTERVAL_S = 2**31 - 1
#: largest task text and serialized inputs, characters
MAX_TASK_CHARS = 20_000
MAX_INPUTS_CHARS = 16_384
_SKILL_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,62}[a-z0-9])?")
# (field name, CrontabSchedule column length) in crontab order
_CRON_FIELDS = (
    ("minute", 240),
    ("hour", 96),
    ("day_of_month", 124),
    ("month_of_year", 64),
    ("day_of_week", 64),
)


class ScheduleInvalid(CognitionError):
    """Bad schedule input (`details`: field, rule); nothing was written."""

    code = "schedule_invalid"


def _invalid(field: str, rule: str, message: str, **extra: Any) -> ScheduleInvalid:
    return ScheduleInvalid(f"{field}: {message}", details={"field": field, "rule": rule, **extra})


@dataclass(frozen=True)
class ScheduleSpec:
    """Validated fields of a schedule."""

    skill_name: str
    task: str
    inputs: dict[str, Any]
    crontab: str
    interval_seconds: int | None
    timezone: str
    enabled: bool


def _check_agent(agent: Any) -> Agent:
    if isinstance(agent, Agent) and agent.pk is not None:
        found = Agent.objects.filter(pk=agent.pk).first()
    elif isinstance(agent, int) and not isinstance(agent, bool) and 0 < agent < 2**63:
        found = Agent.objects.filter(pk=agent).first()
    elif isinstance(agent, str) and agent and "\x00" not in agent and len(agent) <= 100:
        found = Agent.objects.filter(name=agent).first()
    else:
        found = None
    if found is None:
        shown = str(getattr(agent, "pk", agent))[:100]
        raise _invalid("agent", "known_agent", f"no agent {shown!r} exists", agent=shown)
    return found


def parse_crontab(expression: Any) -> dict[str, str]:
    """The five fields of a crontab expression, each checked by celery's own parser."""
    if not isinstance(expression, str) or not expression.strip():
        raise _invalid("crontab", "crontab_syntax", "must be a non-empty crontab expression")
    parts = expression.split()
    if len(parts) != len(_CRON_FIELDS):
        raise _invalid(
            "crontab",
            "crontab_five_fields",
            f"{expression[:200]!r} has {len(parts)} fields; a crontab has 5: "
            "minute hour day-of-month month day-of-week",
        )
    fields: dict[str, str] = {}
    for (name, max_length), value in zip(_CRON_FIELDS, parts, strict=True):
        if len(value) > max_length:
            raise _invalid(
                "crontab",
                "crontab_syntax",
                f"the {name} field is longer than {max_length} characters",
                crontab_field=name,
            )
        try:
            celery_crontab(**{name: value})
        except Exception as exc:  # celery raises ValueError, IndexError, … on bad fields
            raise _invalid(
                "crontab",
                "crontab_syntax",
                f"the {name} field {value!r} is invalid: {exc}",
                crontab_field=name,
            ) from None
        fields[name] = value
    return fields


def _check_timezone(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 64 or "\x00" in value:
        raise _invalid("timezone", "known_timezone", "must be an IANA time zone name like UTC")
    try:
        ZoneInfo(value)
    except Exception:  # ZoneInfoNotFoundError, or ValueError for path-like names
        raise _invalid(
            "timezone", "known_timezone", f"{value[:64]!r} is not a known IANA time zone"
        ) from None
    return value


def _check_interval(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid("interval_seconds", "positive_integer", "must be a whole number of seconds")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise _invalid("interval_seconds", "positive_integer", "must be a whole number of seconds")
    seconds = int(value)
    if seconds <= 0:
        raise _invalid(
            "interval_seconds", "positive_integer", f"{seconds} is not > 0; it must be at least 1"
        )
    if seconds > MAX_INTERVAL_S:
        raise _invalid(
            "interval_seconds",
            "positive_integer",
            f"{seconds} is over the maximum {MAX_INTERVAL_S}",
        )
    return seconds


def _check_skill(agent: Agent, value: Any) -> Policy:
    if not isinstance(value, str) or not _SKILL_NAME.fullmatch(value):
        raise _invalid(
            "skill",
            "known_skill",
            f"{str(value)[:80]!r} is not a skill name (lowercase letters, digits, hyphens)",
        )
    policy = Policy.objects.select_related("skill").filter(skill__name=value, agent=agent).first()
    if policy is None:
        raise _invalid(
            "skill",
            "known_skill",
            f"agent {agent.name!r} has no skill named {value!r}",
            skill=value,
        )
    try:
        # its runs would get these domains: an entry the egress policy refuses fails every fire
        egress.validate_domains(policy.allowed_domains)
    except egress.PolicyError as exc:
        raise _invalid(
            "skill",
            "allowed_domains",
            f"the policy of {value!r} for agent {agent.name!r} allows {exc.entry!r}, which the "
            f"egress policy refuses ({exc}); correct the policy first",
            skill=value,
            egress_rule=exc.rule,
            value=exc.entry,
        ) from None
    return policy


def _check_inputs_schema(policy: Policy, inputs: dict[str, Any]) -> None:
    """The skill's input schema, checked when the schedule is saved (as when a run starts), so
    a schedule whose every fire would be refused is never stored."""
    errors = input_errors(policy.inputs or {}, inputs)
    if errors:
        failing = ", ".join(f"{e.field} ({e.rule})" for e in errors)
        raise _invalid(
            "inputs",
            "input_schema",
            f"do not match the input schema of skill {policy.skill.name!r}: {failing}",
            errors=[e.to_dict() for e in errors],
        )


def _check_task(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid("task", "not_empty", "the task text must not be empty")
    if len(value) > MAX_TASK_CHARS:
        raise _invalid("task", "max_length", f"longer than {MAX_TASK_CHARS} characters")
    if bundle_lib.unstorable_text(value, "task") is not None:
        raise _invalid("task", "storable_text", "holds a NUL or an unpaired surrogate character")
    return value


def _check_inputs(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid("inputs", "json_object", "must be a JSON object")
    where = bundle_lib.unstorable_text(value, "inputs")
    if where is not None:
        raise _invalid("inputs", "storable_text", f"{where} holds a NUL or an unpaired surrogate")
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError):
        raise _invalid("inputs", "json_object", "must be a JSON object") from None
    if size > MAX_INPUTS_CHARS:
        raise _invalid("inputs", "max_size", f"over {MAX_INPUTS_CHARS} characters as JSON")
    return value


def schedule_validate(
    *,
    agent: Agent,
    skill: Any,
    task: Any,
    inputs: Any = None,
    crontab: Any = None,
    interval_seconds: Any = None,
    timezone: Any = "UTC",
    enabled: Any = True,
) -> ScheduleSpec:
    """Check every field's rule; raise `ScheduleInvalid` naming the first that breaks one."""
    policy = _check_skill(agent, skill)
    skill_name = policy.skill.name
    task_text = _check_task(task)
    clean_inputs = _check_inputs(inputs)
    _check_inputs_schema(policy, clean_inputs)
    has_cron = crontab not in (None, "")
    has_interval = interval_seconds is not None
    if has_cron == has_interval:
        raise _invalid(
            "crontab" if has_cron else "interval_seconds",
            "crontab_xor_interval",
            "give exactly one of crontab and interval_seconds",
        )
    cron_text = ""
    seconds: int | None = None
    if has_cron:
        cron_text = " ".join(parse_crontab(crontab).values())
    else:
        seconds = _check_interval(interval_seconds)
    tz = _check_timezone(timezone)
    if not isinstance(enabled, bool):
        raise _invalid("enabled", "boolean", "must be true or false")
    return ScheduleSpec(
        skill_name=skill_name,
        task=task_text,
        inputs=clean_inputs,
        crontab=cron_text,
        interval_seconds=seconds,
        timezone=tz,
        enabled=enabled,
    )
