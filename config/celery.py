"""The Celery application. Wiring only: tasks live in each app's tasks.py."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("motor_cortex")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect(dispatch_uid="config.celery.prefork_database_connections")
def prefork_database_connections(sender: Any = None, **_: Any) -> None:
    """A prefork worker keeps one persistent connection per child instead of a pool.

    Celery's Django fixup closes a pooled database's pool after every prefork task, so a pool
    would be rebuilt (new connections) on each slice; one child runs one slice at a time, so one
    connection kept for up to 60 s is all it needs. Threads workers keep the pool.
    """
    from django.conf import settings

    pool_cls = getattr(sender, "pool_cls", "")
    name = pool_cls if isinstance(pool_cls, str) else getattr(pool_cls, "__module__", "")
    if "prefork" not in name:
        return
    for database in settings.DATABASES.values():
        if (database.get("OPTIONS") or {}).pop("pool", None):
            database["CONN_MAX_AGE"] = 60
