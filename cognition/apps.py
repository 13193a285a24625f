from __future__ import annotations

from django.apps import AppConfig


class CognitionConfig(AppConfig):
    name = "cognition"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The built-in brain: its wake-up hook and its Celery task.
        from cognition.brain import wiring

        wiring.connect()

        # The motor's skill_describe tool (runs bound to no skill read their candidates' SKILL.md).
        from cognition import motor_skills

        motor_skills.register()

        # The skill cortex learns of every run's end through its own hook.
        from cognition.cortex import hook

        hook.connect()

        from runs.outbox import signal_committed

        from .delivery import on_signal_committed

        # Every committed signal wakes long-polls and event streams and is queued for delivery.
        signal_committed.connect(on_signal_committed, dispatch_uid="cognition.delivery")
