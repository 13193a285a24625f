"""Settings, read from the environment (django-environ).

Every variable a user may change is listed in `.env.example` with a one-line comment and in the
README's configuration table. No secret has a production default: outside DEBUG the service refuses
to start without SECRET_KEY and MOTOR_CREDENTIALS_KEY(_FILE).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import environ
from django.core.exceptions import ImproperlyConfigured

from config.logging import configure_structlog

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
_env_file = BASE_DIR / ".env"
if _env_file.is_file():
    environ.Env.read_env(str(_env_file), overwrite=False)
# An empty variable means its default: .env.example lists every setting, most of them empty.
env.ENVIRON = {name: value for name, value in os.environ.items() if value != ""}

DEBUG: bool = env.bool("DEBUG", default=False)

# --- data directory (SQLite file, workspaces, run artifacts) -------------------------------------
MOTOR_DATA_DIR = Path(env.str("MOTOR_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()

# --- metrics (prometheus-client multiprocess mode; runs/metrics.py, cognition/ops/metrics.py) ----
# Every process writes its samples to files under a directory of its host (process ids repeat
# across containers that share the volume), set before anything imports prometheus_client.
# GET /metrics adds up the files of every host under MOTOR_METRICS_DIR.
MOTOR_METRICS_DIR = Path(
    env.str("MOTOR_METRICS_DIR", default="") or str(MOTOR_DATA_DIR / "metrics")
).resolve()
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(MOTOR_METRICS_DIR / socket.gethostname())
try:
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
except OSError as _exc:
    raise ImproperlyConfigured(
        f"The metrics directory {os.environ['PROMETHEUS_MULTIPROC_DIR']} cannot be created "
        f"({_exc.strerror}); set MOTOR_METRICS_DIR to a directory this process may write."
    ) from None
# Bearer token GET /metrics requires; empty: the endpoint answers 404 (metrics off)
MOTOR_METRICS_TOKEN = env.str("MOTOR_METRICS_TOKEN", default="")

SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it in the environment (see .env.example); "
            "only DEBUG=true runs without one."
        )
    SECRET_KEY = "insecure-dev-only-key-never-used-outside-debug"  # noqa: S105 - DEBUG only

ALLOWED_HOSTS: list[str] = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI and ReDoc as static files of the project, so /api/docs/ works without a CDN
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "django_prometheus",
    "skills",
    "runs",
    "forge",
    "cognition",
]

MIDDLEWARE = [
    # request counts and latencies by view and status (django-prometheus); first and last so
    # they time everything in between
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    # request id and run id on every log line of the request (X-Request-ID)
    "cognition.ops.logcontext.RequestLogContextMiddleware",
    # JSON error bodies for what Django answers itself under /api/ (no route, a crash, a Host
    # header it refuses): outside every middleware that can answer, CommonMiddleware included
    # (its trailing-slash redirect is not an error and passes untouched)
    "cognition.api.middleware.APIErrorBodyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # serves the admin's static files from the app image (gunicorn does not serve files)
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database: SQLite under MOTOR_DATA_DIR by default, PostgreSQL via DATABASE_URL ---------------
DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{MOTOR_DATA_DIR / 'motor-cortex.sqlite3'}"
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    from config.sqlite import require_sqlite

    require_sqlite()  # 3.35 or newer (RETURNING), or a clear error naming the way out
    # WAL lets the web process read while a worker writes; the timeout (seconds) waits out
    # short write locks instead of failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # Tests on SQLite use a file like a deployment does (not Django's shared in-memory database,
    # which locks whole tables): concurrent requests then meet the same WAL and write lock.
    DATABASES["default"].setdefault(
        "TEST", {"NAME": str(MOTOR_DATA_DIR / "test-motor-cortex.sqlite3")}
    )
# PostgreSQL connections come from a pool per process (psycopg_pool): a thread takes one for a
# query or a transaction and gives it back when it closes it, which the runtime does before every
# LLM call and tool call. So a threads worker of N threads needs at most MOTOR_DB_POOL_MAX_SIZE
# connections, not N. PostgreSQL sees at most (processes × MOTOR_DB_POOL_MAX_SIZE) from workers
# and web; keep that below its max_connections. 0 turns pooling off (one connection per thread).
# Prefork workers never pool (Celery closes a pool after every prefork task); see config/celery.py.
MOTOR_DB_POOL_MAX_SIZE = env.int("MOTOR_DB_POOL_MAX_SIZE", default=8)
# seconds a thread may wait for a free pooled connection before its query fails
MOTOR_DB_POOL_TIMEOUT_SECONDS = env.float("MOTOR_DB_POOL_TIMEOUT_SECONDS", default=30.0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and MOTOR_DB_POOL_MAX_SIZE > 0:
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django must not
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": MOTOR_DB_POOL_MAX_SIZE,
        "timeout": MOTOR_DB_POOL_TIMEOUT_SECONDS,
        # connections above min_size close after this many idle seconds
        "max_idle": 60.0,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

# People log in on the chat's page and land in the chat (Django's defaults, /accounts/…, do not
# exist here); the admin keeps its own login page. The chat's logout returns to its login; any
# other logout (the admin's) to the landing page, which links the chat and the admin.
LOGIN_URL = "chat-login"
LOGIN_REDIRECT_URL = "chat-index"
LOGOUT_REDIRECT_URL = "home"

STATIC_URL = "static/"
STATIC_ROOT = MOTOR_DATA_DIR / "static"

# --- Redis and Celery ----------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
# One result backend per process instead of one per worker thread: each thread's first task
# message otherwise builds its own Redis backend (milliseconds of CPU each, 100 threads per
# process). Nothing waits on a result here; the Redis client is thread-safe.
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
# The database is the source of truth for run progress; the broker only wakes workers up.
# One message at a time per process, so a killed process loses at most the message it holds.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False  # opted into per task, only where the task is idempotent
# How a worker waits on the LLM. A slice spends almost all its time waiting (LLM reply, sandbox
# call) with no database connection held, so "threads" keeps many slices waiting in one process;
# "prefork" blocks a whole process per slice (README, "Design notes"). Concurrency is the number
# of threads (threads) or child processes (prefork). A slice holds its thread while the model
# answers, so a threads worker carries at most that many runs at once: 100 threads per process
# (one process per core) let two cores carry 200 runs at a 1 s model (bench/motor.py part 5).
CELERY_WORKER_POOL = env.str("CELERY_WORKER_POOL", default="threads")
CELERY_WORKER_CONCURRENCY = (
    int(
        env.str("CELERY_WORKER_CONCURRENCY", default="")
        or (100 if CELERY_WORKER_POOL == "threads" else 0)
    )
    or None
)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # seconds before an unacknowledged message is redelivered; runs hold a DB lease instead
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600),
}
# A lost broker connection is retried for ever (a broker outage of any length ends when it comes
# back; the process supervisor covers anything that ends the worker anyway), at start too.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Slices keep running through a broker outage: they hold a database lease, not the message.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Survives a Redis broker going away with messages unacknowledged (config/celery.py).
CELERY_WORKER_CONSUMER = "config.celery:BrokerLossConsumer"
CELERY_RESULT_EXPIRES = 3600  # seconds
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE

# --- secrets at rest -----------------------------------------------------------------------------
# A comma-separated list of Fernet keys; the first encrypts, all decrypt (rotation).
MOTOR_CREDENTIALS_KEY = env.str("MOTOR_CREDENTIALS_KEY", default="")
MOTOR_CREDENTIALS_KEY_FILE = env.str("MOTOR_CREDENTIALS_KEY_FILE", default="")
if MOTOR_CREDENTIALS_KEY_FILE and not MOTOR_CREDENTIALS_KEY:
    try:
        MOTOR_CREDENTIALS_KEY = Path(MOTOR_CREDENTIALS_KEY_FILE).read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"MOTOR_CREDENTIALS_KEY_FILE={MOTOR_CREDENTIALS_KEY_FILE!r} cannot be read: {exc}"
        ) from exc
if not MOTOR_CREDENTIALS_KEY and not DEBUG:
    raise ImproperlyConfigured(
        "MOTOR_CREDENTIALS_KEY (or MOTOR_CREDENTIALS_KEY_FILE) is not set: credentials cannot be "
        'encrypted at rest. Generate one with `python -c "from cryptography.fernet import Fernet; '
        'print(Fernet.generate_key().decode())"`.'
    )

# --- skills --------------------------------------------------------------------------------------
MOTOR_SKILL_MAX_FILE_BYTES = env.int("MOTOR_SKILL_MAX_FILE_BYTES", default=1024 * 1024)
MOTOR_SKILL_MAX_TOTAL_BYTES = env.int("MOTOR_SKILL_MAX_TOTAL_BYTES", default=10 * 1024 * 1024)
MOTOR_SKILL_MAX_ARCHIVE_ENTRIES = env.int("MOTOR_SKILL_MAX_ARCHIVE_ENTRIES", default=2000)
MOTOR_SKILL_MAX_COMPRESSION_RATIO = env.int("MOTOR_SKILL_MAX_COMPRESSION_RATIO", default=100)
MOTOR_EXAMPLE_SKILLS_DIR = BASE_DIR / "skills" / "examples"

# --- sandbox -------------------------------------------------------------------------------------
SANDBOX_BACKEND = env.str("SANDBOX_BACKEND", default="bwrap")
SANDBOX_ALLOW_LOCAL = env.bool("SANDBOX_ALLOW_LOCAL", default=False)
SANDBOX_DOCKER_IMAGE = env.str("SANDBOX_DOCKER_IMAGE", default="motor-cortex-sandbox:local")
MOTOR_WORKSPACES_DIR = Path(
    env.str("MOTOR_WORKSPACES_DIR", default=str(MOTOR_DATA_DIR / "workspaces"))
).resolve()

# dependency layers (runs.layers): a skill's declared packages, installed once per (skill
# version, dependency list) in a sandbox that may reach only these indexes, mounted read-only
MOTOR_PIP_INDEX_URL = env.str("MOTOR_PIP_INDEX_URL", default="https://pypi.org/simple/")
# hosts the pip index serves its files from, when not the index's own host (comma-separated)
MOTOR_PIP_DOWNLOAD_HOSTS = env.list("MOTOR_PIP_DOWNLOAD_HOSTS", default=["files.pythonhosted.org"])
MOTOR_NPM_REGISTRY_URL = env.str("MOTOR_NPM_REGISTRY_URL", default="https://registry.npmjs.org/")
MOTOR_DEPENDENCY_LAYERS_DIR = Path(
    env.str("MOTOR_DEPENDENCY_LAYERS_DIR", default="") or str(MOTOR_DATA_DIR / "layers")
).resolve()
MOTOR_DEPENDENCY_INSTALL_TIMEOUT_SECONDS = env.int(
    "MOTOR_DEPENDENCY_INSTALL_TIMEOUT_SECONDS", default=300
)
for _index_setting in ("MOTOR_PIP_INDEX_URL", "MOTOR_NPM_REGISTRY_URL"):
    if urlparse(globals()[_index_setting]).scheme not in ("http", "https"):
        raise ImproperlyConfigured(f"{_index_setting} must be an http(s) URL.")
if not 10 <= MOTOR_DEPENDENCY_INSTALL_TIMEOUT_SECONDS <= 3600:
    raise ImproperlyConfigured("MOTOR_DEPENDENCY_INSTALL_TIMEOUT_SECONDS must be 10-3600 seconds.")

# run artifacts: files a run wrote or changed in its workspace, copied here when it completes
MOTOR_ARTIFACTS_DIR = Path(
    env.str("MOTOR_ARTIFACTS_DIR", default="") or str(MOTOR_DATA_DIR / "motor-runs")
).resolve()
# most files kept per run, largest file and most bytes per run (the rest is listed as omitted)
MOTOR_ARTIFACTS_MAX_FILES = env.int("MOTOR_ARTIFACTS_MAX_FILES", default=50)
MOTOR_ARTIFACTS_MAX_FILE_BYTES = env.int("MOTOR_ARTIFACTS_MAX_FILE_BYTES", default=25 * 1024 * 1024)
MOTOR_ARTIFACTS_MAX_TOTAL_BYTES = env.int(
    "MOTOR_ARTIFACTS_MAX_TOTAL_BYTES", default=100 * 1024 * 1024
)
# seconds artifacts are kept before the purge (celery-beat, every MOTOR_PURGE_INTERVAL_SECONDS)
MOTOR_ARTIFACTS_RETENTION_SECONDS = env.int("MOTOR_ARTIFACTS_RETENTION_SECONDS", default=30 * 86400)

# days the per-call audit trail is kept before the purge (celery-beat, every
# MOTOR_PURGE_INTERVAL_SECONDS); nothing younger can be deleted
MOTOR_AUDIT_RETENTION_DAYS = env.int("MOTOR_AUDIT_RETENTION_DAYS", default=365)
if MOTOR_AUDIT_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("MOTOR_AUDIT_RETENTION_DAYS must be 1 or more.")

# --- LLM -----------------------------------------------------------------------------------------
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")
LLM_API_KEY = env.str("LLM_API_KEY", default="")
LLM_DEFAULT_MODEL = env.str("LLM_DEFAULT_MODEL", default="gpt-4o-mini")
LLM_FAST_MODEL = env.str("LLM_FAST_MODEL", default="")
LLM_SMART_MODEL = env.str("LLM_SMART_MODEL", default="")
LLM_MOTOR_MODEL = env.str("LLM_MOTOR_MODEL", default="")
# a vision-capable model (OpenAI-compatible image input) for the browser's vision check; empty: off
LLM_VISION_MODEL = env.str("LLM_VISION_MODEL", default="")
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=60.0)
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=2)

# --- the skill index (skills.index; docs/skills.md "Finding skills") -----------------------------
# candidates a search returns (the brain's <available_skills>, the motor's tool list)
MOTOR_SKILL_SEARCH_TOP_K = env.int("MOTOR_SKILL_SEARCH_TOP_K", default=10)
# longest query in characters: the API refuses a longer one (400), callers in code truncate to it
MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS = env.int("MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS", default=2000)
# Dense retrieval is on when a model is named; the endpoint and key default to the LLM's.
EMBEDDINGS_MODEL = env.str("EMBEDDINGS_MODEL", default="")
EMBEDDINGS_BASE_URL = env.str("EMBEDDINGS_BASE_URL", default="") or LLM_BASE_URL
EMBEDDINGS_API_KEY = env.str("EMBEDDINGS_API_KEY", default="") or LLM_API_KEY
# seconds one embeddings request may take (a search falls back to lexical past it)
EMBEDDINGS_TIMEOUT_SECONDS = env.float("EMBEDDINGS_TIMEOUT_SECONDS", default=10.0)
# texts sent in one embeddings request when indexing
EMBEDDINGS_BATCH_SIZE = env.int("EMBEDDINGS_BATCH_SIZE", default=64)

# --- skill sources (cognition.sources; docs/skills.md "Acquiring skills") ----------------------
# seconds one request to a skill registry may take, body included (connect, send, every byte)
MOTOR_SKILL_SOURCE_TIMEOUT_SECONDS = env.float("MOTOR_SKILL_SOURCE_TIMEOUT_SECONDS", default=10.0)
# most bytes read of a registry's search answer; a longer body is refused, not parsed
MOTOR_SKILL_SOURCE_MAX_RESPONSE_BYTES = env.int(
    "MOTOR_SKILL_SOURCE_MAX_RESPONSE_BYTES", default=1024 * 1024
)
# most bytes read of one downloaded skill archive
MOTOR_SKILL_SOURCE_MAX_ARCHIVE_BYTES = env.int(
    "MOTOR_SKILL_SOURCE_MAX_ARCHIVE_BYTES", default=10 * 1024 * 1024
)

# --- the skill cortex (cognition.cortex; docs/skills.md "The skill cortex") ---------------------
# seconds the cortex waits before it retries a skill's run that failed with an api_error (seed 003
# §3.4: once, after about 3 s)
MOTOR_CORTEX_RETRY_WAIT_SECONDS = env.float("MOTOR_CORTEX_RETRY_WAIT_SECONDS", default=3.0)

# --- the built-in brain (cognition.brain) ----------------------------------------------------------
# seconds one conversational turn may take, LLM calls and tool calls together
COGNITION_TURN_BUDGET_SECONDS = env.float("COGNITION_TURN_BUDGET_SECONDS", default=120.0)
# most core.* tool calls the brain may make in one turn; later calls are refused as data
COGNITION_TURN_MAX_TOOL_CALLS = env.int("COGNITION_TURN_MAX_TOOL_CALLS", default=8)
# most stored messages of a conversation sent to the LLM as history
COGNITION_HISTORY_MESSAGES = env.int("COGNITION_HISTORY_MESSAGES", default=40)
# Celery queue for the brain's wake-up tasks (empty: the default queue)
COGNITION_BRAIN_QUEUE = env.str("COGNITION_BRAIN_QUEUE", default="")

# --- the motor runtime ---------------------------------------------------------------------------
# seconds a worker holds a run's execution lease before the reaper may hand the run to another
MOTOR_LEASE_TTL_SECONDS = env.int("MOTOR_LEASE_TTL_SECONDS", default=900)
# seconds a slice whose database connection failed waits for the database before it gives up
# (its run's lease then lapses and the reaper wakes the run)
MOTOR_DB_OUTAGE_WAIT_SECONDS = env.int("MOTOR_DB_OUTAGE_WAIT_SECONDS", default=300)
# seconds the Redis fast-path mutex key lives (the database constraint is the authority)
MOTOR_MUTEX_TTL_SECONDS = env.int("MOTOR_MUTEX_TTL_SECONDS", default=3600)
MOTOR_MUTEX_REDIS_URL = env.str("MOTOR_MUTEX_REDIS_URL", default="")
# a slice whose worker died this many times is poison: the run fails instead of looping
MOTOR_MAX_REDELIVERIES = env.int("MOTOR_MAX_REDELIVERIES", default=3)
# seconds past a lease's expiry before the reaper re-enqueues the run
MOTOR_REAPER_GRACE_SECONDS = env.int("MOTOR_REAPER_GRACE_SECONDS", default=120)
# seconds a run may wait for the user's answer before it fails with "User response timeout"
MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS = env.int("MOTOR_AWAITING_INPUT_TIMEOUT_SECONDS", default=1800)
# seconds an approval request stays valid
MOTOR_APPROVAL_TTL_SECONDS = env.int("MOTOR_APPROVAL_TTL_SECONDS", default=900)
# dotted path of resolver(*, agent_id, run_id, names) -> {name: value} handing credentials to tools
MOTOR_CREDENTIAL_RESOLVER = (
    env.str("MOTOR_CREDENTIAL_RESOLVER", default="") or "cognition.core.run_credentials_resolve"
)
# extract skills from a run's workspace after it completes
MOTOR_EXTRACT_SKILLS = env.bool("MOTOR_EXTRACT_SKILLS", default=True)
# Celery queue for run slices (empty: the default queue)
MOTOR_RUN_QUEUE = env.str("MOTOR_RUN_QUEUE", default="")
# --- several worker hosts (runs.hosts, runs.placement, runs.snapshots) ----------------------------
# on: workers announce their host, consume a queue of their own, and snapshot run workspaces so
# another host can resume a run; off (one host): none of that, workspaces stay where they are
MOTOR_MULTI_HOST = env.bool("MOTOR_MULTI_HOST", default=False)
# this worker host's id: its heartbeat row and its own queue motor.host.<id> (empty: the hostname)
MOTOR_HOST_ID = env.str("MOTOR_HOST_ID", default="")
# seconds between two heartbeats of a worker host
MOTOR_HOST_HEARTBEAT_SECONDS = env.float("MOTOR_HOST_HEARTBEAT_SECONDS", default=10.0)
# seconds without a heartbeat after which a host is gone: its runs' slices go to the shared queue
MOTOR_HOST_GRACE_SECONDS = env.float("MOTOR_HOST_GRACE_SECONDS", default=60.0)
# object storage for workspace snapshots: empty (MOTOR_SNAPSHOT_DIR) or s3://bucket/prefix
MOTOR_SNAPSHOT_STORAGE_URL = env.str("MOTOR_SNAPSHOT_STORAGE_URL", default="")
# the S3-compatible endpoint (e.g. http://minio:9000); empty: AWS
MOTOR_SNAPSHOT_S3_ENDPOINT_URL = env.str("MOTOR_SNAPSHOT_S3_ENDPOINT_URL", default="")
# the local snapshot store when MOTOR_SNAPSHOT_STORAGE_URL is empty
MOTOR_SNAPSHOT_DIR = Path(
    env.str("MOTOR_SNAPSHOT_DIR", default=str(MOTOR_DATA_DIR / "snapshots"))
).resolve()
# largest workspace snapshotted, bytes (the sandbox's workspace quota); a larger one fails the run
MOTOR_SNAPSHOT_MAX_BYTES = env.int("MOTOR_SNAPSHOT_MAX_BYTES", default=256 * 1024 * 1024)
# seconds a slice keeps retrying a snapshot the store refuses before it leaves the step for later
MOTOR_SNAPSHOT_RETRY_SECONDS = env.float("MOTOR_SNAPSHOT_RETRY_SECONDS", default=30.0)
# --- SkillForge: deployed MCP servers (forge) ----------------------------------------------------
# the skill runtime (sandbox/image/runtime.sh builds it): the same path on the host and inside
MOTOR_SKILL_RUNTIME = env.str("MOTOR_SKILL_RUNTIME", default="/opt/motor-cortex-runtime")
# dotted path of resolver(*, agent_id, names) -> {name: value}: a deployed server's credentials
FORGE_CREDENTIAL_RESOLVER = (
    env.str("FORGE_CREDENTIAL_RESOLVER", default="") or "cognition.selectors.credentials_for_run"
)
# seconds one call of a deployed MCP tool may take (a manifest's call_timeout_s wins)
FORGE_CALL_TIMEOUT_SECONDS = env.float("FORGE_CALL_TIMEOUT_SECONDS", default=60.0)
# seconds a deployed server may take to start and answer initialize
FORGE_START_TIMEOUT_SECONDS = env.float("FORGE_START_TIMEOUT_SECONDS", default=30.0)
# seconds without a call before a worker stops a deployed server
FORGE_SERVER_IDLE_TIMEOUT_SECONDS = env.float("FORGE_SERVER_IDLE_TIMEOUT_SECONDS", default=600.0)
# crashes in a row (no successful call between) before a deployed server is marked failed
FORGE_MAX_CRASHES = env.int("FORGE_MAX_CRASHES", default=3)
# CPU seconds a deployed server may use in one life (a manifest's cpu_seconds wins)
FORGE_SERVER_CPU_SECONDS = env.int("FORGE_SERVER_CPU_SECONDS", default=3600)

# seconds without a call before a worker closes a run's warm sandbox session
MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS = env.int("MOTOR_SANDBOX_IDLE_TIMEOUT_SECONDS", default=300)
# spare sandboxes each worker process keeps started for the next runs (runs.sessions); 0: none
MOTOR_SANDBOX_POOL_SIZE = env.int("MOTOR_SANDBOX_POOL_SIZE", default=2)
# seconds one browser action (navigate, click, ...) may take inside the page
MOTOR_BROWSER_ACTION_TIMEOUT_SECONDS = env.float(
    "MOTOR_BROWSER_ACTION_TIMEOUT_SECONDS", default=10.0
)
# seconds of browser time one run may use in all (its actions together)
MOTOR_BROWSER_RUN_SECONDS = env.float("MOTOR_BROWSER_RUN_SECONDS", default=300.0)
# seconds one slice (one Celery task) keeps advancing a run before it re-queues it, so a long run
# does not hold a worker thread from the runs queued behind it; 0 = one iteration per task
MOTOR_SLICE_SECONDS = env.float("MOTOR_SLICE_SECONDS", default=10.0)
# seconds between checks of a run's fencing token while a sandbox call runs (bounds cancel delay)
MOTOR_CALL_WATCH_INTERVAL_SECONDS = env.float("MOTOR_CALL_WATCH_INTERVAL_SECONDS", default=1.0)
# seconds the LLM may take for a failed run's short hint (one call, no retries, after the failure
# is recorded; never delays it); 0 = no hints
MOTOR_FAILURE_HINT_SECONDS = env.float("MOTOR_FAILURE_HINT_SECONDS", default=10.0)
# seconds between reaper passes (lost wake-ups, expired approvals, unanswered questions)
MOTOR_REAPER_INTERVAL_SECONDS = env.int("MOTOR_REAPER_INTERVAL_SECONDS", default=60)

# seconds between sends of the run wake-ups the broker refused while it was unreachable
MOTOR_WAKEUP_SWEEP_INTERVAL_SECONDS = env.int("MOTOR_WAKEUP_SWEEP_INTERVAL_SECONDS", default=10)

# --- signal delivery to the brain (cognition.delivery, cognition.api.signals) -------------------
# seconds one webhook POST may take (connect + send + answer) before it counts as a failed attempt
MOTOR_WEBHOOK_TIMEOUT_SECONDS = env.float("MOTOR_WEBHOOK_TIMEOUT_SECONDS", default=10.0)
# deliver to webhooks on loopback, private, link-local or this host's addresses (a brain on the
# same host or network); off, such receivers are refused (no requests into the internal network)
MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES = env.bool(
    "MOTOR_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", default=False
)
# attempts per signal and receiver (webhook or brain hook) before the delivery is marked failed
MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS = env.int("MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS", default=8)
# seconds before the 2nd attempt; each later wait doubles, up to the cap
MOTOR_SIGNAL_BACKOFF_BASE_SECONDS = env.float("MOTOR_SIGNAL_BACKOFF_BASE_SECONDS", default=5.0)
# longest wait between two attempts, seconds (keep it below CELERY_VISIBILITY_TIMEOUT)
MOTOR_SIGNAL_BACKOFF_CAP_SECONDS = env.float("MOTOR_SIGNAL_BACKOFF_CAP_SECONDS", default=600.0)
# Celery queue for delivery tasks (empty: the default queue); a worker of its own keeps delivery
# from waiting behind run slices
MOTOR_SIGNAL_QUEUE = env.str("MOTOR_SIGNAL_QUEUE", default="")
# seconds between sweeper passes that re-queue signals never dispatched and lost attempts
MOTOR_SIGNAL_SWEEP_INTERVAL_SECONDS = env.int("MOTOR_SIGNAL_SWEEP_INTERVAL_SECONDS", default=60)
# seconds a signal or a due attempt may wait for its task before the sweeper re-queues it
MOTOR_SIGNAL_SWEEP_GRACE_SECONDS = env.int("MOTOR_SIGNAL_SWEEP_GRACE_SECONDS", default=30)
# how far back the sweeper looks for signals never dispatched, seconds
MOTOR_SIGNAL_SWEEP_HORIZON_SECONDS = env.int("MOTOR_SIGNAL_SWEEP_HORIZON_SECONDS", default=86400)
# longest long-poll wait of GET /api/v1/signals/ (the `wait` parameter is capped to it), seconds
MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS = env.int("MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS", default=30)
# seconds an event stream (GET /api/v1/signals/stream/) stays open before the client reconnects
MOTOR_SIGNAL_STREAM_MAX_SECONDS = env.int("MOTOR_SIGNAL_STREAM_MAX_SECONDS", default=300)
# seconds between heartbeat comments on an idle event stream
MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS = env.float(
    "MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS", default=15.0
)
# seconds a finished delivery (delivered, failed, skipped) and its attempt history are kept
MOTOR_SIGNAL_DELIVERY_RETENTION_SECONDS = env.int(
    "MOTOR_SIGNAL_DELIVERY_RETENTION_SECONDS", default=30 * 86400
)
# seconds an Idempotency-Key replays its first response; older records are purged
MOTOR_IDEMPOTENCY_TTL_SECONDS = env.int("MOTOR_IDEMPOTENCY_TTL_SECONDS", default=86400)
# seconds between purges of expired idempotency records and old deliveries (celery-beat)
MOTOR_PURGE_INTERVAL_SECONDS = env.int("MOTOR_PURGE_INTERVAL_SECONDS", default=3600)
for _name in (
    "MOTOR_SIGNAL_DELIVERY_RETENTION_SECONDS",
    "MOTOR_IDEMPOTENCY_TTL_SECONDS",
    "MOTOR_PURGE_INTERVAL_SECONDS",
    "MOTOR_ARTIFACTS_RETENTION_SECONDS",
):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1 second.")
for _name in (
    "MOTOR_WEBHOOK_TIMEOUT_SECONDS",
    "MOTOR_SIGNAL_BACKOFF_BASE_SECONDS",
    "MOTOR_SIGNAL_STREAM_HEARTBEAT_SECONDS",
):
    if globals()[_name] <= 0:
        raise ImproperlyConfigured(f"{_name} must be more than 0 seconds.")
if MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS < 1:
    raise ImproperlyConfigured("MOTOR_SIGNAL_DELIVERY_MAX_ATTEMPTS must be 1 or more.")
if MOTOR_SIGNAL_BACKOFF_CAP_SECONDS < MOTOR_SIGNAL_BACKOFF_BASE_SECONDS:
    raise ImproperlyConfigured(
        "MOTOR_SIGNAL_BACKOFF_CAP_SECONDS must be at least MOTOR_SIGNAL_BACKOFF_BASE_SECONDS."
    )
if not 0 <= MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS <= 30:
    raise ImproperlyConfigured("MOTOR_SIGNAL_LONG_POLL_MAX_SECONDS must be 0-30 seconds.")

# --- SkillForge (docs/skillforge.md) ---
# Hosts counted as public read-only APIs by the approval rule: a generated read-only skill that
# reaches only these needs no domain confirmation (it is still approved by a person unless the
# agent's trust level allows automatic approval).
FORGE_PUBLIC_API_DOMAINS: list[str] = env.list(
    "FORGE_PUBLIC_API_DOMAINS",
    default=["api.open-meteo.com", "api.frankfurter.app", "api.github.com", "en.wikipedia.org"],
)

CELERY_BEAT_SCHEDULE = {
    "motor-reaper": {
        "task": "runs.run_reap",
        "schedule": float(MOTOR_REAPER_INTERVAL_SECONDS),
    },
    "sandbox-orphans": {
        "task": "runs.sandbox_orphans_kill",
        "schedule": float(MOTOR_REAPER_INTERVAL_SECONDS),
    },
    "motor-wakeup-sweeper": {
        "task": "runs.wakeups_send_pending",
        "schedule": float(MOTOR_WAKEUP_SWEEP_INTERVAL_SECONDS),
    },
    "signal-delivery-sweeper": {
        "task": "cognition.signal_delivery_sweep",
        "schedule": float(MOTOR_SIGNAL_SWEEP_INTERVAL_SECONDS),
    },
    "records-purge": {
        "task": "cognition.records_purge",
        "schedule": float(MOTOR_PURGE_INTERVAL_SECONDS),
    },
    "artifacts-purge": {
        "task": "runs.artifacts_purge",
        "schedule": float(MOTOR_PURGE_INTERVAL_SECONDS),
    },
    "tool-audit-purge": {
        "task": "runs.tool_audit_purge",
        "schedule": float(MOTOR_PURGE_INTERVAL_SECONDS),
    },
    "dependency-layers-gc": {
        "task": "runs.layers_collect",
        "schedule": float(MOTOR_PURGE_INTERVAL_SECONDS),
    },
    "cortex-follow-ups": {
        "task": "cognition.cortex_follow_ups_sweep",
        "schedule": float(MOTOR_REAPER_INTERVAL_SECONDS),
    },
    "forge-reaper": {
        "task": "forge.reap",
        "schedule": float(MOTOR_REAPER_INTERVAL_SECONDS),
    },
}

# --- API -----------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON bodies are refused past a nesting depth (cognition.api.parsers); bodies past Django's
    # DATA_UPLOAD_MAX_MEMORY_SIZE are refused with 413 by the exception handler.
    # Request bodies are JSON only: form encodings carry no types, so every field would be text.
    "DEFAULT_PARSER_CLASSES": ["cognition.api.parsers.BoundedJSONParser"],
    # One error body for every endpoint: {"error": {"code", "message", "details"}}.
    "EXCEPTION_HANDLER": "cognition.api.exceptions.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Motor Cortex API",
    "DESCRIPTION": "Sandboxed, durable, human-approved hands for AI agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # served from this instance's static files (drf-spectacular-sidecar), never from a CDN
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two request fields are called "mode" (core.act's and SkillForge's); each gets its own name.
    "ENUM_NAME_OVERRIDES": {"SkillForgeModeEnum": ["create", "edit", "improve"]},
}

# --- energy (seed 001 "Energy Model") -----------------------------------------------------------
# Energy units (0.0-1.0 scale) an agent regains per hour, added lazily when the level is read.
MOTOR_ENERGY_REGEN_PER_HOUR = env.float("MOTOR_ENERGY_REGEN_PER_HOUR", default=0.1)
if MOTOR_ENERGY_REGEN_PER_HOUR < 0:
    raise ImproperlyConfigured("MOTOR_ENERGY_REGEN_PER_HOUR must be 0 or more (energy per hour).")
# What a run costs (seed 001 Phase 2): base + max(0, iterations - free) x per_iteration, the base
# taken when the run is created, each further iteration's share when its model reply is recorded.
MOTOR_ENERGY_ONESHOT_COST = env.float("MOTOR_ENERGY_ONESHOT_COST", default=0.05)
MOTOR_ENERGY_AGENTIC_BASE = env.float("MOTOR_ENERGY_AGENTIC_BASE", default=0.10)
MOTOR_ENERGY_AGENTIC_FREE_ITERATIONS = env.int("MOTOR_ENERGY_AGENTIC_FREE_ITERATIONS", default=5)
MOTOR_ENERGY_AGENTIC_PER_ITERATION = env.float("MOTOR_ENERGY_AGENTIC_PER_ITERATION", default=0.01)
# the rates of a run granted the browser tool
MOTOR_ENERGY_BROWSER_BASE = env.float("MOTOR_ENERGY_BROWSER_BASE", default=0.20)
MOTOR_ENERGY_BROWSER_FREE_ITERATIONS = env.int("MOTOR_ENERGY_BROWSER_FREE_ITERATIONS", default=5)
MOTOR_ENERGY_BROWSER_PER_ITERATION = env.float("MOTOR_ENERGY_BROWSER_PER_ITERATION", default=0.02)
for _name in (
    "MOTOR_ENERGY_ONESHOT_COST",
    "MOTOR_ENERGY_AGENTIC_BASE",
    "MOTOR_ENERGY_AGENTIC_FREE_ITERATIONS",
    "MOTOR_ENERGY_AGENTIC_PER_ITERATION",
    "MOTOR_ENERGY_BROWSER_BASE",
    "MOTOR_ENERGY_BROWSER_FREE_ITERATIONS",
    "MOTOR_ENERGY_BROWSER_PER_ITERATION",
):
    if not 0 <= globals()[_name] <= (1 if "FREE" not in _name else 50):
        raise ImproperlyConfigured(
            f"{_name} must be between 0 and {1 if 'FREE' not in _name else 50}."
        )

# --- logging -------------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
# json: one JSON object per line (config/logging.py); console: readable lines (bin/dev sets it)
LOG_FORMAT = env.str("LOG_FORMAT", default="json")
if LOG_FORMAT not in ("json", "console"):
    raise ImproperlyConfigured("LOG_FORMAT must be 'json' or 'console'.")
configure_structlog()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "structured": {
            "()": "config.logging.formatter",
            "fmt": LOG_FORMAT,
            # values that must never appear in a log line, whatever logs them
            "secrets": [
                SECRET_KEY,
                *MOTOR_CREDENTIALS_KEY.split(","),
                LLM_API_KEY,
                MOTOR_METRICS_TOKEN,
                *(str(part) for part in (DATABASES["default"].get("PASSWORD"),) if part),
                *(urlparse(url).password or "" for url in (REDIS_URL, CELERY_BROKER_URL)),
            ],
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # the HTTP client logs every request at INFO: a line per LLM call, and its formatting
        # was measurable CPU per iteration; failures still reach the log as the runtime's own
        "httpx2": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
    },
}
