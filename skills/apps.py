from __future__ import annotations

from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The skill index follows installs, rollbacks and deletions through model signals.
        from skills import admin_index
        from skills.index import store

        store.connect()
        admin_index.register()
