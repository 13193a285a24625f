"""One active run per agent: Redis is the fast path, PostgreSQL the authority.

The Redis key ``motor:mutex:agent:<id>`` holds the id of the run that owns the agent's hands. It
answers "busy" without touching the database, but Redis can lose keys (flush, eviction, failover),
so the partial unique constraint `motorrun_one_active_per_agent` decides in the end; the key is
repaired from the database whenever the two disagree.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import redis
from django.conf import settings

from runs.errors import MotorBusy
from runs.models import TERMINAL_STATUSES, MotorRun

logger = logging.getLogger(__name__)

#: seconds a reservation lives before its run row is committed; a starter that dies in between
#: blocks the fast path for at most this long (the database never saw its run)
RESERVATION_TTL_S = 30

# Compare-and-delete / compare-and-extend, keyed by the run id (no release of someone else's key).
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_HOLD = """
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end
if not current then return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) and 1 or 0 end
return 0
"""


def hold_ttl_s() -> int:
    """Seconds an active run's key lives without being refreshed (refreshed on every slice)."""
    return int(getattr(settings, "MOTOR_MUTEX_TTL_SECONDS", 3600))


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)


def redis_client() -> redis.Redis:
    url = getattr(settings, "MOTOR_MUTEX_REDIS_URL", "") or settings.REDIS_URL
    return _client(url)


def mutex_key(agent_id: int) -> str:
    return f"motor:mutex:agent:{agent_id}"


def _holder_status(run_id: str) -> str | None:
    """The committed status of the run a key names; None while (or if) it has no row."""
    return MotorRun.objects.filter(pk=run_id).values_list("status", flat=True).first()


def mutex_reserve(*, agent_id: int, run_id: str) -> bool:
    """Reserve the agent for `run_id` on the fast path, or raise MotorBusy naming the holder.

    Returns False when the fast path cannot decide (Redis unreachable, or the holder's run not
    committed yet): the caller's insert then lets the database decide alone.
    """
    key = mutex_key(agent_id)
    client = redis_client()
    try:
        for _ in range(2):
            if client.set(key, run_id, nx=True, ex=RESERVATION_TTL_S):
                return True
            holder = client.get(key)
            if holder is None:
                continue  # expired between SET and GET; try once more
            holder_id = holder.decode()
            if holder_id == run_id:
                return True
            status = _holder_status(holder_id)
            if status is None:
                # The holder's row is not committed yet (or never will be): only the database
                # can tell, so let the caller's insert ask it rather than name a phantom run.
                return False
            if status in TERMINAL_STATUSES:
                # A terminal run whose release never happened (crash after commit).
                client.eval(_RELEASE, 1, key, holder_id)
                continue
            raise MotorBusy(run_id=holder_id)
        return False
    except redis.RedisError:
        logger.warning(
            "mutex fast path unavailable for agent %s; using the database only", agent_id
        )
        return False


def mutex_hold(*, agent_id: int, run_id: str) -> None:
    """Extend (or re-create after a flush) the key of an active run; never steals another's key."""
    try:
        redis_client().eval(_HOLD, 1, mutex_key(agent_id), run_id, hold_ttl_s())
    except redis.RedisError:
        logger.warning("mutex fast path unavailable for agent %s", agent_id)


def mutex_release(*, agent_id: int, run_id: str) -> None:
    """Drop the key if, and only if, `run_id` holds it."""
    try:
        redis_client().eval(_RELEASE, 1, mutex_key(agent_id), run_id)
    except redis.RedisError:
        logger.warning("mutex fast path unavailable for agent %s", agent_id)


def mutex_holder(*, agent_id: int) -> str | None:
    """The run id the fast path currently names for the agent (None if none or unreachable)."""
    try:
        value = redis_client().get(mutex_key(agent_id))
    except redis.RedisError:
        return None
    return value.decode() if value is not None else None
