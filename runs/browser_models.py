"""What the browser tool keeps in the database: a run's browser time and each skill's selectors.

- `BrowserTime`: the browser time a run has used, all its actions together, whichever worker
  process ran them (MOTOR_BROWSER_RUN_SECONDS bounds it). A run that moves to another worker, or
  a worker that restarts, keeps counting from here.
- `BrowserSelector`: the selector cache of a skill. When the model names an element by ref and
  gives it a `target` (a short description: "Log in button"), the element's role and name are
  kept under that target; a later run of the same skill may name the target alone and the
  browser finds the element by role and name without the model reading the snapshot for it.
  Each use counts a hit or a miss; after `SELECTOR_MAX_MISSES` misses in a row the row is dropped
  (an event in the run's trace) and the model finds the element again.
"""

from __future__ import annotations

from django.db import models

#: misses in a row after which a cached selector is dropped
SELECTOR_MAX_MISSES = 2


class BrowserTime(models.Model):
    run = models.OneToOneField(
        "runs.MotorRun", on_delete=models.CASCADE, primary_key=True, related_name="browser_time"
    )
    spent_ms = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.run_id}: {self.spent_ms} ms of browser time"


class BrowserSelector(models.Model):
    # Given as a string: runs may use skills, never the other way round.
    skill = models.ForeignKey(
        "skills.Skill", on_delete=models.CASCADE, related_name="browser_selectors"
    )
    target = models.CharField(max_length=200, help_text="The model's description of the element.")
    role = models.CharField(max_length=40)
    name = models.CharField(max_length=200, blank=True, default="")
    hits = models.PositiveIntegerField(default=0)
    misses = models.PositiveIntegerField(default=0)
    misses_in_row = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["skill", "target"], name="browser_selector_target")
        ]

    def __str__(self) -> str:
        return f"{self.skill_id} {self.target!r}: {self.role} {self.name!r}"
