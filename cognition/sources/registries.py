"""Reading one skill source: search it for a task, then fetch one skill's files.

Two kinds, one interface (`reader_for`):

- `DirectoryReader`: a directory on this host holding skill directories (a registry's git
  checkout as it is). Every valid skill below it is ranked with BM25 over its name, description
  and keywords (the skill index's tokenizer); an invalid one is left out of the ranking.
- `HttpReader`: a ClawHub-shaped registry. Search is `GET {base}/api/v1/search?q=&limit=`
  answering `{"results": [{"slug", "displayName", "summary", "version", "score"}, ...]}`;
  download is `GET {base}/api/v1/download?slug=&version=` answering a .zip (or .tar.gz) of the
  skill. Entries of a search answer that break the shape are skipped; an answer that is not
  that JSON object is refused.

A fetched skill is validated by the bundle rules (`skills.bundle`: traversal entries, links,
bombs and size limits refuse the archive) and must hold exactly one skill.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import bm25s
from django.conf import settings

from skills import bundle as bundle_lib
from skills.index.text import tokenize
from skills.services import _limits

from .errors import SourceUnavailable
from .fetching import fetch
from .models import SkillSource, SourceKind

SEARCH_PATH = "/api/v1/search"
DOWNLOAD_PATH = "/api/v1/download"
#: a registry's slug: what it calls a skill (ClawHub's are skill names, sometimes owner/name)
_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}")
MAX_TEXT_CHARS = 1024


@dataclass(frozen=True)
class Listing:
    """One search hit of one source: the registry's handle (`slug`), what it says of the skill
    and which version it offers (empty when the source has no versions)."""

    slug: str
    name: str
    description: str
    version: str
    score: float


@dataclass(frozen=True)
class FetchedSkill:
    """A skill's files as the source delivers them: the validated bundle, and what an import
    reads (the archive's bytes and file name, or the skill's directory)."""

    bundle: bundle_lib.Bundle
    archive: bytes | None = None
    filename: str = ""
    directory: Path | None = None


class Reader(Protocol):
    def search(self, query: str, *, limit: int) -> list[Listing]: ...

    def fetch(self, listing: Listing) -> FetchedSkill: ...


def _unavailable(source: SkillSource, rule: str, message: str, **extra: Any) -> SourceUnavailable:
    return SourceUnavailable(
        f"Skill source {source.name!r}: {message}",
        details={"source": source.name, "rule": rule, **extra},
    )


def _one_skill(
    source: SkillSource,
    found: list[tuple[str, bundle_lib.Bundle]],
    errors: list[tuple[str, bundle_lib.BundleError]],
    what: str,
) -> tuple[str, bundle_lib.Bundle]:
    if errors:
        where, exc = errors[0]
        raise _unavailable(
            source,
            "source-skill-invalid",
            f"{what} was refused: {exc}",
            problems=[p.to_dict() for _, e in errors for p in e.problems][:20],
        )
    if len(found) != 1:
        raise _unavailable(
            source,
            "source-skill-not-one",
            f"{what} holds {len(found)} skills; exactly one was expected.",
        )
    return found[0]


class DirectoryReader:
    """A local directory of skill directories (see the module docstring)."""

    def __init__(self, source: SkillSource) -> None:
        self.source = source
        self.root = Path(source.location)

    def _skills(self) -> list[tuple[str, bundle_lib.Bundle]]:
        if not self.root.is_absolute() or not self.root.is_dir() or self.root.is_symlink():
            raise _unavailable(
                self.source,
                "source-directory-missing",
                f"{self.source.location} is not a directory.",
            )
        found, _errors = bundle_lib.locate_tree_skills(self.root, limits=_limits())
        return found

    def search(self, query: str, *, limit: int) -> list[Listing]:
        skills = self._skills()
        tokens = tokenize(query)
        if not skills or not tokens:
            return []
        documents = []
        for _, bundle in skills:
            metadata = bundle.frontmatter.get("metadata")
            keywords = metadata.get("keywords", "") if isinstance(metadata, dict) else ""
            words = bundle.name.replace("-", " ")
            text = f"{words} {words} {bundle.description} {keywords}"
            documents.append(tokenize(text) or ["_"])
        retriever = bm25s.BM25()
        retriever.index(documents, show_progress=False)
        scores = retriever.get_scores(tokens)
        ranked = sorted(
            (i for i in range(len(skills)) if scores[i] > 0),
            key=lambda i: (-float(scores[i]), skills[i][1].name),
        )[:limit]
        return [
            Listing(
                slug=skills[i][0],
                name=skills[i][1].name,
                description=skills[i][1].description,
                version="",
                score=float(scores[i]),
            )
            for i in ranked
        ]

    def fetch(self, listing: Listing) -> FetchedSkill:
        directory = (self.root / listing.slug).resolve()
        if not directory.is_relative_to(self.root.resolve()):
            raise _unavailable(
                self.source, "source-skill-invalid", f"{listing.slug!r} is outside the source."
            )
        found, errors = bundle_lib.locate_tree_skills(directory, limits=_limits())
        _, bundle = _one_skill(self.source, found, errors, f"Skill directory {listing.slug}")
        return FetchedSkill(bundle=bundle, directory=directory)


def _text(value: Any) -> str:
    return " ".join(value.split())[:MAX_TEXT_CHARS] if isinstance(value, str) else ""


class HttpReader:
    """A ClawHub-shaped HTTP registry (see the module docstring)."""

    def __init__(self, source: SkillSource) -> None:
        self.source = source
        self.base = source.location.rstrip("/")

    def search(self, query: str, *, limit: int) -> list[Listing]:
        answer = fetch(
            source_name=self.source.name,
            url=self.base + SEARCH_PATH,
            params={"q": query, "limit": str(limit)},
            max_bytes=int(settings.MOTOR_SKILL_SOURCE_MAX_RESPONSE_BYTES),
            what="The search",
        )
        try:
            data = json.loads(answer.body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _unavailable(
                self.source, "source-malformed-json", "The search answer is not JSON."
            ) from exc
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise _unavailable(
                self.source,
                "source-malformed-json",
                'The search answer has no "results" list.',
            )
        listings: list[Listing] = []
        for item in results:
            if not isinstance(item, dict):
                continue
            slug, version = item.get("slug"), item.get("version") or ""
            if not isinstance(slug, str) or not _SLUG.fullmatch(slug) or ".." in slug:
                continue
            if not isinstance(version, str) or (version and not _VERSION.fullmatch(version)):
                continue
            score = item.get("score")
            listings.append(
                Listing(
                    slug=slug,
                    name=_text(item.get("displayName")) or slug,
                    description=_text(item.get("summary")),
                    version=version,
                    score=float(score) if isinstance(score, int | float) else 0.0,
                )
            )
            if len(listings) >= limit:
                break
        return listings

    def fetch(self, listing: Listing) -> FetchedSkill:
        params = {"slug": listing.slug}
        if listing.version:
            params["version"] = listing.version
        answer = fetch(
            source_name=self.source.name,
            url=self.base + DOWNLOAD_PATH,
            params=params,
            max_bytes=int(settings.MOTOR_SKILL_SOURCE_MAX_ARCHIVE_BYTES),
            what=f"The download of {listing.slug}",
        )
        gzipped = answer.body[:2] == b"\x1f\x8b" or "gzip" in answer.content_type
        filename = listing.slug.replace("/", "-") + (".tar.gz" if gzipped else ".zip")
        try:
            found, errors = bundle_lib.locate_archive_skills(
                answer.body, filename=filename, limits=_limits()
            )
        except bundle_lib.BundleError as exc:
            raise _unavailable(
                self.source,
                "source-skill-invalid",
                f"the archive of {listing.slug} was refused: {exc}",
                problems=exc.to_dict()[:20],
            ) from exc
        _, bundle = _one_skill(self.source, found, errors, f"The archive of {listing.slug}")
        return FetchedSkill(bundle=bundle, archive=answer.body, filename=filename)


def reader_for(source: SkillSource) -> Reader:
    """The reader of `source`'s kind."""
    if source.kind == SourceKind.DIRECTORY:
        return DirectoryReader(source)
    return HttpReader(source)
