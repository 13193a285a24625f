"""Import refusals name what was wrong and the rule, and leave the database as it was."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from skills.bundle import BundleError, BundleLimits, bundles_from_archive, parse_skill_md
from skills.errors import SkillValidationError
from skills.imports import skill_import_archive, skill_import_pasted
from tests.skills.conftest import skill_md, write_skill

HUGE_INT = "9" * 4301  # Python refuses int() of more than 4,300 digits


def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


def _archive_problems(data: bytes, filename: str, **limits: int) -> list[tuple[str, str]]:
    with pytest.raises(BundleError) as caught:
        bundles_from_archive(data, filename=filename, limits=BundleLimits(**limits))
    return [(p.path, p.rule) for p in caught.value.problems]


# --- names -----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["my--skill", "a--b--c", "web---search"])
def test_a_name_with_consecutive_hyphens_is_refused(name, agent, system_actor, snapshot):
    # given
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_pasted(text=skill_md(name), actor=system_actor, agent=agent)
    assert [(p["path"], p["rule"]) for p in caught.value.details["problems"]] == [
        ("SKILL.md", "name-double-hyphen")
    ]
    assert "name-double-hyphen" in caught.value.message
    assert snapshot() == before


# --- zip entry names -------------------------------------------------------------------------


def test_a_zip_entry_name_holding_a_nul_is_refused_not_cut():
    # given a zip whose entry is stored as "demo/scripts/run.sh<NUL>.txt" in both headers (zip
    # tools show the whole name; a reader that cuts at the NUL would store "run.sh")
    placeholder = b"demo/scripts/run.shX.txt"
    data = _zip([("demo/SKILL.md", skill_md("demo").encode()), (placeholder.decode(), b"echo\n")])
    assert data.count(placeholder) == 2  # local header and central directory
    data = data.replace(placeholder, placeholder.replace(b"X", b"\0"))

    # when / then: the entry is refused under its whole name
    assert _archive_problems(data, "nul.zip") == [
        ("demo/scripts/run.sh\\u0000.txt", "path-control-char")
    ]


def test_a_tar_entry_name_holding_a_nul_is_refused_not_cut():
    import tarfile

    # given a pax header naming the entry "demo/scripts/run.sh<NUL>.txt"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        head = skill_md("demo").encode()
        info = tarfile.TarInfo("demo/SKILL.md")
        info.size = len(head)
        archive.addfile(info, io.BytesIO(head))
        entry = tarfile.TarInfo("demo/scripts/placeholder")
        entry.size = 5
        entry.pax_headers = {"path": "demo/scripts/run.sh\x00.txt"}
        archive.addfile(entry, io.BytesIO(b"echo\n"))

    # when / then
    assert _archive_problems(buffer.getvalue(), "nul.tar") == [
        ("demo/scripts/run.sh\\u0000.txt", "path-control-char")
    ]


# --- compression ratio per entry -------------------------------------------------------------


def test_compression_ratio_is_judged_per_entry_and_names_the_entry():
    # given one 512 KiB entry of zeros (about 1000:1) in a small archive; the whole archive
    # unpacks to far less than 1 MiB
    data = _zip(
        [
            ("demo/SKILL.md", skill_md("demo").encode()),
            ("demo/assets/zeros.bin", bytes(512 * 1024)),
        ]
    )

    # when / then: refused naming the entry
    with pytest.raises(BundleError) as caught:
        bundles_from_archive(data, filename="small-bomb.zip")
    assert [(p.path, p.rule) for p in caught.value.problems] == [
        ("demo/assets/zeros.bin", "archive-compression-ratio")
    ]
    assert "small-bomb.zip" in caught.value.problems[0].message


def test_ordinary_entries_pass_the_per_entry_ratio():
    # given real text (a few times compressible) and a small, very regular file below the floor
    text = "".join(
        f"line {i}: the quick brown fox jumps over {i * 7919 % 1000}\n" for i in range(8000)
    )
    data = _zip(
        [
            ("demo/SKILL.md", skill_md("demo").encode()),
            ("demo/references/log.md", text.encode()),
            ("demo/assets/blank.txt", b" " * 16_000),
        ]
    )

    # when
    bundles, errors = bundles_from_archive(data, filename="ok.zip")

    # then
    assert errors == []
    assert [b.name for b in bundles] == ["demo"]


def test_a_zip_bomb_names_its_entry():
    # given 50 MB of zeros deflated to about 50 KB
    data = _zip(
        [("demo/SKILL.md", skill_md("demo").encode()), ("demo/assets/z.bin", bytes(50_000_000))]
    )

    # when / then: the ratio refusal names the entry, the size refusal the archive's total
    assert _archive_problems(data, "bomb.zip") == [
        ("bomb.zip", "archive-too-large"),
        ("demo/assets/z.bin", "archive-compression-ratio"),
    ]


def test_a_tar_gz_bomb_names_the_entry_being_unpacked():
    import gzip
    import tarfile

    # given a gzip stream of 50 MB of zeros inside a tar
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        head = skill_md("demo").encode()
        info = tarfile.TarInfo("demo/SKILL.md")
        info.size = len(head)
        archive.addfile(info, io.BytesIO(head))
        member = tarfile.TarInfo("demo/assets/zeros.bin")
        member.size = 50_000_000
        archive.addfile(member, io.BytesIO(bytes(member.size)))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb") as gz:
        gz.write(raw.getvalue())

    # when / then
    with pytest.raises(BundleError) as caught:
        bundles_from_archive(packed.getvalue(), filename="bomb.tar.gz")
    assert [(p.path, p.rule) for p in caught.value.problems] == [
        ("demo/assets/zeros.bin", "archive-compression-ratio")
    ]
    assert "bomb.tar.gz" in caught.value.problems[0].message


# --- frontmatter that Python cannot turn into values -----------------------------------------


@pytest.mark.parametrize(
    "line",
    [f"version: {HUGE_INT}", f"metadata:\n  size: {HUGE_INT}", "released: 2026-13-45"],
    ids=["huge-int", "nested-huge-int", "impossible-date"],
)
def test_frontmatter_values_that_cannot_be_built_are_a_validation_error(line):
    # given
    text = f"---\nname: demo\ndescription: d\n{line}\n---\n"

    # when / then
    with pytest.raises(BundleError) as caught:
        parse_skill_md(text)
    assert [(p.path, p.rule) for p in caught.value.problems] == [("SKILL.md", "yaml-invalid")]


@pytest.mark.django_db
def test_pasting_a_huge_integer_is_refused_with_file_and_rule(agent, system_actor, snapshot):
    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skill_import_pasted(
            text=f"---\nname: demo\ndescription: d\nversion: {HUGE_INT}\n---\n",
            actor=system_actor,
            agent=agent,
        )
    assert [(p["path"], p["rule"]) for p in caught.value.details["problems"]] == [
        ("SKILL.md", "yaml-invalid")
    ]
    assert snapshot() == before


@pytest.mark.django_db
def test_import_skills_refuses_a_huge_integer_without_a_traceback(tmp_path: Path, snapshot):
    # given
    directory = tmp_path / "demo"
    directory.mkdir()
    (directory / "SKILL.md").write_text(f"---\nname: demo\ndescription: d\nv: {HUGE_INT}\n---\n")
    before = snapshot()

    # when / then
    with pytest.raises(CommandError) as caught:
        call_command("import_skills", str(directory), stdout=io.StringIO())
    assert "SKILL.md" in str(caught.value)
    assert "[yaml-invalid]" in str(caught.value)
    assert snapshot() == before


# --- the command prints every refusal's rule -------------------------------------------------


@pytest.mark.django_db
def test_import_skills_prints_the_rule_held_in_the_details(tmp_path: Path, snapshot):
    # given a tree holding one skill twice (the rule is only in the error's details)
    write_skill(tmp_path / "team-a", "weather")
    write_skill(tmp_path / "team-b", "weather", body="# other\n")
    before = snapshot()

    # when / then
    with pytest.raises(CommandError) as caught:
        call_command("import_skills", str(tmp_path), stdout=io.StringIO())
    assert "weather" in str(caught.value)
    assert "[duplicate_skill]" in str(caught.value)
    assert snapshot() == before


@pytest.mark.django_db
def test_import_skills_prints_the_rule_of_a_refused_policy_proposal(tmp_path: Path, snapshot):
    # given a skill whose policy.json proposes a tool that does not exist
    directory = write_skill(tmp_path, "weather", {"policy.json": '{"tools": ["sudo"]}'})
    before = snapshot()

    # when / then
    with pytest.raises(CommandError) as caught:
        call_command("import_skills", str(directory), stdout=io.StringIO())
    assert "[known_tool]" in str(caught.value)
    assert snapshot() == before


@pytest.mark.django_db
def test_archive_refusal_through_the_service_names_the_entry(agent, system_actor, snapshot):
    data = _zip(
        [("demo/SKILL.md", skill_md("demo").encode()), ("demo/assets/z.bin", bytes(512 * 1024))]
    )
    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(data=data, filename="x.zip", actor=system_actor, agent=agent)
    assert "demo/assets/z.bin" in caught.value.message
    assert "[archive-compression-ratio]" in caught.value.message
    assert snapshot() == before
