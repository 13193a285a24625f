from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the Celery signal handlers (worker start-up re-emission of questions).
        from runs import signals  # noqa: F401

        # The browser is a tool kind of its own (an executor and a manifest), registered once.
        from runs.browser_tool import register

        register()
