"""Keeping the index in step with the skills: entries written on install / new version / rollback,
removed with the skill, and the generation counters bumped in the same transaction.

Hooks (connected in `skills.apps.SkillsConfig.ready`), so every path that changes a skill's
current version (install, import, extraction, rollback) or deletes it keeps the index current
without knowing about it:

- `Skill` post_save: (re)index when its current version differs from the indexed one;
- `Skill` post_delete (its entry goes with it by cascade): documents generation;
- `Policy` created or deleted: visibility generation (who may see which skill).

Registered MCP tools: the layer that deploys MCP servers (forge, above this one) registers a
*tool source* (`tool_source_register`): given version ids, the tools their servers listed (name,
docstring). Entries are built with them, and `tools_reindex` re-indexes a skill when a version
of it registers its tools.

Embeddings are computed by a Celery task queued after the commit (`embed_later`), never inside
the install's transaction nor on the request that installed: an HTTP call must not hold the
skill's row locks or keep a person waiting, and a failing endpoint must not fail an install.
The task retries a failed endpoint (skills.tasks); meanwhile, and for good if it never
answers, the entry is found lexically.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from skills.models import Policy, Skill, SkillFile, SkillVersion

from . import embeddings
from .documents import INDEXED_FILES, ToolTerms, search_terms, text_hash
from .models import IndexGeneration, SkillIndexEntry, SkillIndexState
from .text import tokenize

log = logging.getLogger(__name__)


def generation_bump(*keys: str) -> None:
    """Renew the stamps `keys` (IndexGeneration values); part of the caller's transaction."""
    for key in keys:
        stamp = secrets.randbits(62)
        if not SkillIndexState.objects.filter(key=key).update(stamp=stamp):
            SkillIndexState.objects.update_or_create(key=key, defaults={"stamp": stamp})


def generations() -> dict[str, int]:
    """The current stamps (one raw query: every search reads them)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, stamp FROM {SkillIndexState._meta.db_table}")  # noqa: S608
        return {str(k): int(v) for k, v in cursor.fetchall()}


#: version ids -> the tools their deployed servers registered, by version id
ToolSource = Callable[[list[int]], dict[int, list[ToolTerms]]]
_tool_sources: dict[str, ToolSource] = {}


def tool_source_register(name: str, source: ToolSource) -> None:
    """Register (or replace) a source of registered tools (called from an app's ready())."""
    _tool_sources[name] = source


def registered_tools(version_ids: list[int]) -> dict[int, list[ToolTerms]]:
    """The registered tools of each version, from every tool source (empty lists for none)."""
    out: dict[int, list[ToolTerms]] = {v: [] for v in version_ids}
    for source in _tool_sources.values():
        for version_id, tools in source(list(version_ids)).items():
            out.setdefault(version_id, []).extend(tools)
    return out


def tools_reindex(*, skill_id: int) -> SkillIndexEntry | None:
    """Re-index a skill after a version of it registered its tools (a tool source calls it
    once the registration committed); its text hash changes, so it is embedded again."""
    skill = Skill.objects.select_related("current_version").filter(pk=skill_id).first()
    return skill_index(skill=skill) if skill is not None else None


def _indexed_files(version_ids: list[int]) -> dict[int, dict[str, bytes]]:
    files: dict[int, dict[str, bytes]] = {v: {} for v in version_ids}
    rows = SkillFile.objects.filter(version_id__in=version_ids, path__in=INDEXED_FILES)
    for version_id, path, data in rows.values_list("version_id", "path", "data"):
        files[version_id][path] = bytes(data)
    return files


def entry_build(
    *,
    skill: Skill,
    version: SkillVersion,
    files: dict[str, bytes] | None = None,
    tools: list[ToolTerms] | None = None,
) -> SkillIndexEntry:
    """An unsaved entry for `version` of `skill` (`files`: its indexed files, `tools`: its
    registered tools, when the caller fetched them already)."""
    if files is None:
        files = _indexed_files([version.pk])[version.pk]
    if tools is None:
        tools = registered_tools([version.pk])[version.pk]
    terms = search_terms(
        name=skill.name,
        description=version.description,
        frontmatter=version.frontmatter or {},
        files=files,
        registered_tools=tools,
    )
    document = terms.document()
    return SkillIndexEntry(
        skill=skill,
        version=version,
        name=skill.name,
        description=version.description,
        fields=terms.as_fields(),
        document=document,
        terms=" ".join(tokenize(document)),
        text_hash=text_hash(document),
        indexed_at=timezone.now(),
    )


def skill_index(*, skill: Skill) -> SkillIndexEntry | None:
    """Index `skill`'s current version (replacing its entry); None, and no entry, when it has no
    version. Embedding follows after the commit when an embeddings model is configured."""
    version = skill.current_version
    with transaction.atomic():
        if version is None:
            deleted, _ = SkillIndexEntry.objects.filter(skill=skill).delete()
            if deleted:
                generation_bump(IndexGeneration.DOCUMENTS)
            return None
        built = entry_build(skill=skill, version=version)
        entry, _ = SkillIndexEntry.objects.update_or_create(
            skill=skill,
            defaults={
                f: getattr(built, f)
                for f in (
                    "version",
                    "name",
                    "description",
                    "fields",
                    "document",
                    "terms",
                    "text_hash",
                    "indexed_at",
                )
            },
        )
        generation_bump(IndexGeneration.DOCUMENTS)
    if embeddings.configured():
        entry_id = entry.pk
        transaction.on_commit(lambda: embed_later(entry_ids=[entry_id]))
    return entry


def embed_later(*, entry_ids: list[int]) -> None:
    """Queue the embedding of `entry_ids` (skills.tasks.skill_index_embed_task): the HTTP call
    to the endpoint runs in a worker, off the request that installed the skill. A broker that
    cannot take the message loses nothing but time: the entry is found lexically until
    `skill_index --embed` (or its next version) embeds it."""
    from skills.tasks import skill_index_embed_task

    try:
        skill_index_embed_task.delay(list(entry_ids))
    except Exception:  # noqa: BLE001 - any broker failure; the install has committed
        log.warning("skill index: embedding of entries %s not queued", entry_ids, exc_info=True)


def index_rebuild(*, batch_size: int = 500) -> int:
    """Index every skill's current version from scratch (the `skill_index` command, the
    benchmark); returns the number of entries. Embeddings are not computed here."""
    count = 0
    with transaction.atomic():
        SkillIndexEntry.objects.all().delete()
        skills = list(Skill.objects.exclude(current_version=None).select_related("current_version"))
        for start in range(0, len(skills), batch_size):
            chunk = skills[start : start + batch_size]
            ids = [s.current_version_id for s in chunk]
            files = _indexed_files(ids)  # type: ignore[arg-type]
            tools = registered_tools(ids)  # type: ignore[arg-type]
            entries = [
                entry_build(
                    skill=s,
                    version=s.current_version,  # type: ignore[arg-type]
                    files=files[s.current_version_id],  # type: ignore[index]
                    tools=tools[s.current_version_id],  # type: ignore[index]
                )
                for s in chunk
            ]
            SkillIndexEntry.objects.bulk_create(entries)
            count += len(entries)
        generation_bump(IndexGeneration.DOCUMENTS, IndexGeneration.VISIBILITY)
    return count


# --- signal receivers ----------------------------------------------------------------------------


def on_skill_saved(sender: Any, instance: Skill, update_fields: Any = None, **kwargs: Any) -> None:
    if update_fields is not None and "current_version" not in update_fields:
        return
    indexed = (
        SkillIndexEntry.objects.filter(skill_id=instance.pk)
        .values_list("version_id", flat=True)
        .first()
    )
    if indexed is None and instance.current_version_id is None:
        return
    if indexed != instance.current_version_id:
        skill_index(skill=instance)


def on_skill_deleted(sender: Any, **kwargs: Any) -> None:
    generation_bump(IndexGeneration.DOCUMENTS, IndexGeneration.VISIBILITY)


def on_policy_saved(sender: Any, created: bool = False, **kwargs: Any) -> None:
    if created:
        generation_bump(IndexGeneration.VISIBILITY)


def on_policy_deleted(sender: Any, **kwargs: Any) -> None:
    generation_bump(IndexGeneration.VISIBILITY)


def connect() -> None:
    """Connect the receivers (called once from the app's ready())."""
    from django.db.models.signals import post_delete, post_save

    post_save.connect(on_skill_saved, sender=Skill, dispatch_uid="skill_index_skill_saved")
    post_delete.connect(on_skill_deleted, sender=Skill, dispatch_uid="skill_index_skill_deleted")
    post_save.connect(on_policy_saved, sender=Policy, dispatch_uid="skill_index_policy_saved")
    post_delete.connect(on_policy_deleted, sender=Policy, dispatch_uid="skill_index_policy_deleted")
