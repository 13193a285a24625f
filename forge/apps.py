from __future__ import annotations

from django.apps import AppConfig


class ForgeConfig(AppConfig):
    name = "forge"
    default_auto_field = "django.db.models.BigAutoField"
