from __future__ import annotations

from django.apps import AppConfig


class CognitionConfig(AppConfig):
    name = "cognition"
    default_auto_field = "django.db.models.BigAutoField"
