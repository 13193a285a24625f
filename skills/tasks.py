"""Celery entry points of the skills app. Thin: take ids, call one service, return."""

from __future__ import annotations

import logging

from celery import shared_task

log = logging.getLogger(__name__)

#: attempts after the first when the embeddings endpoint fails, and the first wait (seconds,
#: doubled each time: 5, 10, 20)
EMBED_MAX_RETRIES = 3
EMBED_RETRY_BASE_SECONDS = 5


# acks_late: embedding is idempotent (only entries whose vector is missing or stale are sent,
# and a vector is replaced, never added twice), so a worker lost mid-call redoes it harmlessly.
@shared_task(
    bind=True,
    name="skills.index_embed",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    max_retries=EMBED_MAX_RETRIES,
)
def skill_index_embed_task(self, entry_ids: list[int]) -> int:  # type: ignore[no-untyped-def]
    """Embed the index entries `entry_ids` (those still missing or stale); returns how many
    vectors were stored. A failing endpoint is retried with a doubling wait; after the last
    retry the entries stay lexical until `manage.py skill_index --embed`. Entries deleted
    meanwhile are skipped."""
    from skills.index.embeddings import EmbeddingsUnavailable, embeddings_refresh

    try:
        return embeddings_refresh(entry_ids=entry_ids, raise_on_failure=True)
    except EmbeddingsUnavailable as exc:
        if self.request.retries >= EMBED_MAX_RETRIES:
            log.warning(
                "skill index: entries %s left lexical after %s retries",
                entry_ids,
                EMBED_MAX_RETRIES,
            )
            return 0
        raise self.retry(
            exc=exc, countdown=EMBED_RETRY_BASE_SECONDS * 2**self.request.retries
        ) from exc
