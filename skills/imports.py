"""Importing skills from outside: a pasted SKILL.md, a directory tree, an uploaded archive.

Nothing in an import is executed. Each skill found is validated on its own
(`skills.bundle`), then installed through `skills.install` as a new skill or a new version, in
its own savepoint:

- By default a tree or archive import installs every valid skill and reports every other one
  as an `ImportRefusal` naming its files and rules (a bad SKILL.md, a policy.json proposal the
  policy rules refuse, a name present twice in the input). With ``all_or_nothing=True`` any
  refusal refuses the whole import and nothing is written.
- Problems of the input as a whole (an archive holding a bomb or a link, a path that is not a
  directory, no skill at all) refuse everything in both modes, as does an import in which no
  skill could be installed; the database is then as it was.

A skill's identity is its name and its source (`Skill.source`). The source of an import is
what the importer states (``source=``: a registry URL, a publisher), else the absolute path of
the imported directory, the archive's file name, or "local" for pasted text. Importing a skill
whose name is installed from another source is refused with both sources named
(``skill-source-conflict``), never made a new version of the other publisher's skill; the
importer may instead give it a new name (``renames=`` / ``install_as=``), which is written into
its SKILL.md. An import from the same source is a new version, as it always was.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from skills import bundle as bundle_lib
from skills.errors import PolicyValidationError, SkillError, SkillValidationError
from skills.install import InstallResult, _bundle_error, _install_locked
from skills.models import LOCAL_SOURCE, SKILL_SOURCE_MAX_LENGTH
from skills.services import Actor, _limits, _storable

Located = tuple[str, bundle_lib.Bundle]  # (skill directory inside the input, bundle)


@dataclass(frozen=True)
class ImportRefusal:
    """One skill of an import that was not installed.

    `where` is its directory inside the input ("." for the input itself); `problems` name
    files relative to the input, each with its rule.
    """

    where: str
    problems: tuple[bundle_lib.Problem, ...]

    def describe(self) -> str:
        return "; ".join(str(problem) for problem in self.problems)


@dataclass(frozen=True)
class ImportReport:
    """What an import installed, and what it refused (never both empty)."""

    installed: list[InstallResult]
    refused: list[ImportRefusal]


def _inside(where: str, path: str) -> str:
    """`path` of a skill at `where`, relative to the import root."""
    if where in ("", ".", bundle_lib.BUNDLE_PATH):
        return path
    if path in ("", ".", bundle_lib.BUNDLE_PATH):
        return where
    return f"{where}/{path}"


def _prefixed(where: str, exc: bundle_lib.BundleError) -> tuple[bundle_lib.Problem, ...]:
    """Problems of one skill of a tree or archive, with paths relative to the import root."""
    return tuple(
        bundle_lib.Problem(_inside(where, p.path), p.rule, p.message) for p in exc.problems
    )


def _install_problem(where: str, exc: SkillError) -> bundle_lib.Problem:
    """A refusal met while installing one skill, as a problem naming its file and rule."""
    rule = str(exc.details.get("rule") or exc.code)
    if isinstance(exc, PolicyValidationError):
        prefix = f"{bundle_lib.POLICY_FILE}: "
        message = exc.message.removeprefix(prefix)
        return bundle_lib.Problem(_inside(where, bundle_lib.POLICY_FILE), rule, message)
    return bundle_lib.Problem(_inside(where, bundle_lib.SKILL_MD), rule, exc.message)


def _source(stated: str | None, default: str) -> str:
    """The import's source: what the importer stated, else `default`; storable and bounded."""
    chosen = stated.strip() if stated is not None and stated.strip() else default
    source = _storable(chosen)
    if len(source) > SKILL_SOURCE_MAX_LENGTH:
        raise SkillValidationError(
            f"The source is longer than {SKILL_SOURCE_MAX_LENGTH} characters.",
            details={"rule": "source-too-long"},
        )
    return source


def _renamed(
    found: Sequence[Located], renames: Mapping[str, str]
) -> tuple[list[Located], dict[str, tuple[bundle_lib.Problem, ...]]]:
    """Apply the importer's new names; a rename naming no skill of the import refuses it."""
    unknown = sorted(set(renames) - {bundle.name for _, bundle in found})
    if unknown:
        raise SkillValidationError(
            f"No skill named {unknown[0]!r} in this import to rename.",
            details={"rule": "rename-unknown", "names": unknown},
        )
    out: list[Located] = []
    refused: dict[str, tuple[bundle_lib.Problem, ...]] = {}
    for where, bundle in found:
        if bundle.name not in renames:
            out.append((where, bundle))
            continue
        try:
            out.append((where, bundle_lib.rename_bundle(bundle, renames[bundle.name])))
        except bundle_lib.BundleError as exc:
            refused[where] = _prefixed(where, exc)
    return out, refused


def _install_located(
    found: Sequence[Located],
    errors: Sequence[tuple[str, bundle_lib.BundleError]],
    *,
    what: str,
    actor: Actor,
    agent: Model | None,
    provenance: Mapping[str, Any],
    source: str,
    renames: Mapping[str, str] | None,
    all_or_nothing: bool,
) -> ImportReport:
    refused: dict[str, tuple[bundle_lib.Problem, ...]] = {
        where: _prefixed(where, exc) for where, exc in errors
    }
    found, rename_refusals = _renamed(found, renames or {})
    refused.update(rename_refusals)
    places: dict[str, list[str]] = defaultdict(list)
    for where, bundle in found:
        places[bundle.name].append(where)
    candidates: list[Located] = []
    for where, bundle in found:
        others = [other for other in places[bundle.name] if other != where]
        if others:
            # Which copy is "the" skill would depend on the order of the walk: neither is.
            refused[where] = (
                bundle_lib.Problem(
                    _inside(where, bundle_lib.SKILL_MD),
                    "duplicate_skill",
                    f"skill {bundle.name!r} is also in {', '.join(others)}; import one of them",
                ),
            )
        else:
            candidates.append((where, bundle))

    installed: list[InstallResult] = []
    with transaction.atomic():
        for where, bundle in candidates:
            try:
                with transaction.atomic():
                    installed.append(
                        _install_locked(
                            bundle=bundle,
                            actor=actor,
                            agent=agent,
                            provenance=provenance,
                            extracted_from=None,
                            pending_credentials=None,
                            apply_proposal=True,
                            source=source,
                        )
                    )
            except SkillError as exc:
                refused[where] = (_install_problem(where, exc),)
        refusals = [ImportRefusal(where, refused[where]) for where in sorted(refused)]
        if refusals and (all_or_nothing or not installed):
            # Raised inside the outer atomic block: every install above is rolled back.
            raise SkillValidationError(
                f"{what} was refused (nothing was imported):",
                problems=[problem for refusal in refusals for problem in refusal.problems],
            )
    return ImportReport(installed=installed, refused=refusals)


def skill_import_pasted(
    *,
    text: str,
    actor: Actor,
    agent: Model | None = None,
    source: str = "pasted",
    install_as: str | None = None,
) -> InstallResult:
    """Install pasted SKILL.md text (seed 000 Scenario 6); nothing is executed.

    `source` labels the version's provenance (where it was pasted); the skill's source is
    "local". `install_as` installs it under that name instead of its own. A skill of that name
    from another source raises `SkillSourceConflict`.
    """
    try:
        bundle = bundle_lib.bundle_from_pasted(text, limits=_limits())
        if install_as is not None:
            bundle = bundle_lib.rename_bundle(bundle, install_as)
    except bundle_lib.BundleError as exc:
        raise _bundle_error(exc, "The pasted SKILL.md") from exc
    provenance = {"source": _storable(source), "fetched_at": timezone.now().isoformat()}
    with transaction.atomic():
        return _install_locked(
            bundle=bundle,
            actor=actor,
            agent=agent,
            provenance=provenance,
            extracted_from=None,
            pending_credentials=None,
            apply_proposal=True,
            source=LOCAL_SOURCE,
        )


def skill_import_directory(
    *,
    path: Path,
    actor: Actor,
    agent: Model | None = None,
    all_or_nothing: bool = False,
    source: str | None = None,
    renames: Mapping[str, str] | None = None,
) -> ImportReport:
    """Install one skill directory, or each skill of a tree of them (see the module docstring
    for what a refusal does in each mode, and for `source` and `renames`)."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        raise SkillValidationError(
            f"{path} is not a directory.", details={"rule": "not-a-directory", "path": str(path)}
        )
    found, errors = bundle_lib.locate_tree_skills(path, limits=_limits())
    import_source = _source(source, str(path.resolve()))
    provenance = {"source": import_source, "fetched_at": timezone.now().isoformat()}
    return _install_located(
        found,
        errors,
        what=f"Directory {path}",
        actor=actor,
        agent=agent,
        provenance=provenance,
        source=import_source,
        renames=renames,
        all_or_nothing=all_or_nothing,
    )


def skill_import_archive(
    *,
    data: bytes,
    filename: str,
    actor: Actor,
    agent: Model | None = None,
    all_or_nothing: bool = False,
    source: str | None = None,
    renames: Mapping[str, str] | None = None,
) -> ImportReport:
    """Install the skills of a .zip / .tar.gz archive; every entry is checked before any skill
    is looked at (see the module docstring for what a refusal does in each mode, and for
    `source` and `renames`)."""
    try:
        found, errors = bundle_lib.locate_archive_skills(data, filename=filename, limits=_limits())
    except bundle_lib.BundleError as exc:
        raise _bundle_error(exc, f"Archive {filename}") from exc
    import_source = _source(source, filename)
    provenance = {"source": import_source, "fetched_at": timezone.now().isoformat()}
    return _install_located(
        found,
        errors,
        what=f"Archive {filename}",
        actor=actor,
        agent=agent,
        provenance=provenance,
        source=import_source,
        renames=renames,
        all_or_nothing=all_or_nothing,
    )
