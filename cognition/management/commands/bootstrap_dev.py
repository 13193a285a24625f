"""Prepare a local instance: an admin login, a default agent, the example skills."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from cognition.models import Agent
from cognition.services import agent_create

ADMIN_USERNAME = "admin"
DEFAULT_AGENT = "assistant"


def login_file() -> Path:
    """Where the admin login of a development instance is kept (mode 0600)."""
    return Path(settings.MOTOR_DATA_DIR) / "admin-login.txt"


class Command(BaseCommand):
    help = (
        "Create the admin login (password kept in MOTOR_DATA_DIR/admin-login.txt, mode 0600), "
        "a default agent and load the example skills. Idempotent."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        login = login_file()
        user_model = get_user_model()
        admin = user_model.objects.filter(username=ADMIN_USERNAME).first()
        if admin is None or not login.exists():
            password = secrets.token_urlsafe(12)
            if admin is None:
                admin = user_model.objects.create_superuser(
                    username=ADMIN_USERNAME, email="", password=password
                )
            else:
                admin.set_password(password)
                admin.save(update_fields=["password"])
            login.parent.mkdir(parents=True, exist_ok=True)
            login.write_text(f"{ADMIN_USERNAME}\n{password}\n")
            login.chmod(0o600)
        username, password = login.read_text().split("\n")[:2]

        if not Agent.objects.filter(name=DEFAULT_AGENT).exists():
            agent_create(name=DEFAULT_AGENT, owner=admin, actor=admin)
        call_command("load_example_skills", agent=DEFAULT_AGENT, verbosity=options["verbosity"])

        self.stdout.write(f"admin login: {username} / {password}")
