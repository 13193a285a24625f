"""Gives each pytest-xdist worker its own Redis database and data directory.

Loaded with `-p tests.parallel_env` (bin/test does) so that it runs before Django reads its
settings: pytest-xdist names the worker in PYTEST_XDIST_WORKER before the worker parses its
options. The PostgreSQL test database needs nothing here (pytest-django already suffixes its name
with the worker id); everything the tests and the worker processes they spawn share through the
environment — the broker and mutex Redis, the data, workspace and metrics directories — is
split.

MOTOR_TEST_REDIS_DBS lists the Redis databases to hand out in worker order ("15,14,13");
worker gwN takes the Nth. Without it the process keeps its own REDIS_URL, which is only safe with
a single worker.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit


def _split_environment() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    match = re.fullmatch(r"gw(\d+)", worker)
    if match is None:
        return
    index = int(match.group(1))
    dbs = [db.strip() for db in os.environ.get("MOTOR_TEST_REDIS_DBS", "").split(",") if db.strip()]
    if index >= len(dbs):
        raise RuntimeError(
            f"pytest-xdist worker {worker} has no Redis database of its own: "
            f"MOTOR_TEST_REDIS_DBS lists {len(dbs)} ({','.join(dbs) or 'none'})"
        )
    for name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "TEST_REDIS_URL"):
        url = os.environ.get(name)
        if url:
            os.environ[name] = urlsplit(url)._replace(path=f"/{dbs[index]}").geturl()
    # the controller's Django settings already chose a metrics directory (under the shared
    # data dir) and the workers inherited it: each worker derives its own from its data dir
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    data_dir = os.environ.get("MOTOR_DATA_DIR")
    if data_dir:
        own = Path(data_dir) / worker
        own.mkdir(parents=True, exist_ok=True)
        os.environ["MOTOR_DATA_DIR"] = str(own)


_split_environment()
