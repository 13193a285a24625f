"""The skill index's tables: one searchable document per skill, its embedding, and the
generation counters that tell every process when its in-memory index is stale.

Imported by `skills.models` so Django registers them with the skills app.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

INDEX_NAME_MAX_LENGTH = 64
EMBEDDING_MODEL_MAX_LENGTH = 200
TEXT_HASH_MAX_LENGTH = 64


class SkillIndexEntry(models.Model):
    """The searchable text of a skill's current version (one row per skill).

    `fields` keeps the parts the text was built from (name, description, headings, keywords,
    example queries, tools) so the admin and the API can show why a skill matched; `document` is
    what the lexical index tokenizes and what the embedding is computed from. `text_hash` is the
    sha256 of `document`: an embedding is current only when its hash matches.
    """

    skill = models.OneToOneField(
        "skills.Skill", on_delete=models.CASCADE, related_name="index_entry"
    )
    version = models.ForeignKey("skills.SkillVersion", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=INDEX_NAME_MAX_LENGTH)
    description = models.TextField(blank=True, default="")
    fields = models.JSONField(default=dict, blank=True)
    document = models.TextField()
    # `document` tokenized (skills.index.text), space-separated: a process rebuilding its
    # in-memory index only splits this instead of tokenizing and stemming every document again.
    terms = models.TextField(blank=True, default="")
    text_hash = models.CharField(max_length=TEXT_HASH_MAX_LENGTH)
    indexed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        indexes = [
            # Every process reads (skill, text hash, version) of every entry when the documents
            # stamp moves (the lexical and dense catch-ups): a covering index lets that read skip
            # the rows, whose document and terms make them many pages long.
            models.Index(fields=["skill", "text_hash", "version"], name="skills_index_entry_stamp"),
        ]
        # the admin lists this model as its search page (skills.admin_index)
        verbose_name = "skill search"
        verbose_name_plural = "skill search"

    def __str__(self) -> str:
        return f"{self.name} (index)"


class SkillEmbedding(models.Model):
    """The dense vector of one index entry under one embeddings model.

    On SQLite the vector is `vector_json` (compared in process). On PostgreSQL it lives in the
    pgvector column `embedding`, which migration 0005 adds with raw SQL only there (Django's
    model state stays the same on both databases) and `skills.index.vectors` alone reads and
    writes; `vector_json` stays empty.
    """

    entry = models.OneToOneField(
        SkillIndexEntry, on_delete=models.CASCADE, related_name="embedding"
    )
    model = models.CharField(max_length=EMBEDDING_MODEL_MAX_LENGTH)
    text_hash = models.CharField(max_length=TEXT_HASH_MAX_LENGTH)
    dims = models.PositiveIntegerField()
    vector_json = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # SQLite's catch-up reads (entry, row id, text hash) of a model's vectors: covered
            # here, it skips the rows, whose vector makes them pages long (skills.index.vectors).
            models.Index(
                fields=["model", "dims", "entry", "text_hash"], name="skills_embedding_stamp"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.entry_id} {self.model} ({self.dims})"


class IndexGeneration(models.TextChoices):
    """What a generation counter tracks."""

    DOCUMENTS = "documents", "Indexed documents"
    VISIBILITY = "visibility", "Which agent may see which skill"
    EMBEDDINGS = "embeddings", "Stored embeddings"


class SkillIndexState(models.Model):
    """A stamp renewed in the same transaction as every change of what it tracks, so a process
    holding an in-memory index rebuilds it exactly when the stamp differs from the one it was
    built at. Random rather than a counter: a rolled-back change must not leave a process with
    an index built from uncommitted rows under a value that a later change would reuse."""

    key = models.CharField(max_length=32, primary_key=True, choices=IndexGeneration.choices)
    stamp = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.key}={self.stamp}"
