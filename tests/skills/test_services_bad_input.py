"""Every bad input of the issue, through the services: a clear error naming the file and the rule,
and the database exactly as it was (every skills table counted, policies compared)."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from skills.bundle import content_hash
from skills.errors import SkillValidationError
from skills.imports import skill_import_archive, skill_import_directory, skill_import_pasted
from skills.install import skill_install_bundle
from skills.models import PolicyStatus
from tests.skills.conftest import make_bundle, skill_md, write_skill

pytestmark = pytest.mark.django_db

MB = 1024 * 1024  # bytes


@pytest.fixture(autouse=True)
def existing(agent, system_actor):
    """Something already in the database that a refused import must not touch."""
    return skill_install_bundle(bundle=make_bundle("existing"), actor=system_actor, agent=agent)


def _rules(exc: SkillValidationError) -> set[tuple[str, str]]:
    return {(p["path"], p["rule"]) for p in exc.details["problems"]}


def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("---\nname: weather\ndescription: [unclosed\n---\nbody\n", "yaml-invalid"),
        ("# Weather\nNo frontmatter here.\n", "frontmatter-missing"),
        ("---\nname: weather\ndescription: x\n", "frontmatter-unterminated"),
        (skill_md("Weather"), "name-format"),
        (skill_md("wéather"), "name-format"),
        (skill_md("weather", description="d" * 1100), "description-too-long"),
        ("---\nname: weather\n---\nbody\n", "description-missing"),
    ],
    ids=[
        "malformed-yaml",
        "no-frontmatter",
        "unterminated",
        "uppercase",
        "non-ascii",
        "long-desc",
        "no-desc",
    ],
)
def test_pasted_skill_md_refused(text, rule, agent, system_actor, snapshot):
    # given
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_pasted(text=text, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("SKILL.md", rule)}
    assert "SKILL.md" in caught.value.message
    assert rule in caught.value.message
    assert snapshot() == before


def test_pasted_skill_md_with_bom_and_crlf_is_accepted(agent, system_actor):
    # given a SKILL.md saved by an editor that adds a byte-order mark and CRLF line ends
    text = "\ufeff" + skill_md("weather").replace("\n", "\r\n")

    # when
    result = skill_import_pasted(text=text, actor=system_actor, agent=agent)

    # then it is tolerated, and the stored bytes (and so the hash) are exactly what was given
    assert result.skill.name == "weather"
    assert result.skill.description == "Does a useful thing."
    assert result.policy.status == PolicyStatus.PENDING_REVIEW
    [stored] = result.version.files.all()
    assert (stored.path, bytes(stored.data)) == ("SKILL.md", text.encode())
    assert result.version.content_hash == content_hash([("SKILL.md", text.encode())])


def test_byte_order_mark_inside_a_file_name_is_refused(agent, system_actor, snapshot):
    # given an archive entry whose name hides a U+FEFF (invisible in most file lists)
    data = _zip(
        [
            ("weather/SKILL.md", skill_md("weather").encode()),
            ("weather/references/\ufeffnotes.md", b"notes"),
        ]
    )
    before = snapshot()

    # when / then the name is shown escaped, with its rule
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(data=data, filename="w.zip", actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("weather/references/\\ufeffnotes.md", "path-zero-width")}
    assert snapshot() == before


@pytest.mark.parametrize(
    ("frontmatter_name", "rule"),
    [
        ("|\n  weather", "name-format"),
        ('"weather\\n"', "name-format"),
        ('"we ather"', "name-format"),
        ('"weather\\u0000"', "frontmatter-invalid-char"),
    ],
    ids=["block-scalar-newline", "quoted-newline", "space", "nul"],
)
def test_name_with_hidden_trailing_characters_is_refused(
    frontmatter_name, rule, agent, system_actor, snapshot
):
    # given a name that a "$"-anchored pattern would let through with its trailing newline
    text = f"---\nname: {frontmatter_name}\ndescription: d\n---\nbody\n"
    before = snapshot()

    # when / then a clear refusal, not a database constraint error
    with pytest.raises(SkillValidationError) as caught:
        skill_import_pasted(text=text, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("SKILL.md", rule)}
    assert snapshot() == before


def test_name_must_equal_directory(tmp_path: Path, agent, system_actor, snapshot):
    # given a directory "weather" whose SKILL.md says "forecast"
    directory = tmp_path / "weather"
    directory.mkdir()
    (directory / "SKILL.md").write_text(skill_md("forecast"))
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=directory, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("SKILL.md", "name-dir-mismatch")}
    assert snapshot() == before


def test_file_over_one_megabyte_refused(tmp_path: Path, agent, system_actor, snapshot):
    # given a 1.1 MB reference file
    directory = write_skill(tmp_path, "weather", {"references/big.md": b"a" * int(1.1 * MB)})
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=directory, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("references/big.md", "file-too-large")}
    assert snapshot() == before


def test_skill_over_ten_megabytes_refused(tmp_path: Path, agent, system_actor, snapshot):
    # given eleven files of 1,000,000 bytes (each under the per-file limit)
    directory = write_skill(
        tmp_path, "weather", {f"assets/part{i}.bin": os.urandom(1_000_000) for i in range(11)}
    )
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=directory, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {(".", "bundle-too-large")}
    assert snapshot() == before


def test_symlink_to_etc_passwd_refused(tmp_path: Path, agent, system_actor, snapshot):
    # given
    directory = write_skill(tmp_path, "weather")
    (directory / "references").mkdir()
    os.symlink("/etc/passwd", directory / "references" / "passwd.md")
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=directory, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("references/passwd.md", "symlink")}
    assert snapshot() == before


def test_tree_with_one_invalid_skill_imports_nothing_when_all_or_nothing(
    tmp_path: Path, agent, system_actor, snapshot
):
    # given one good and one bad skill side by side
    write_skill(tmp_path, "good")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("no frontmatter\n")
    before = snapshot()

    # when / then: the problem path names the skill directory inside the tree
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=tmp_path, actor=system_actor, agent=agent, all_or_nothing=True)
    assert _rules(caught.value) == {("bad/SKILL.md", "frontmatter-missing")}
    assert "nothing was imported" in caught.value.message
    assert snapshot() == before


def test_archive_with_parent_traversal_refused(agent, system_actor, snapshot):
    # given
    data = _zip([("weather/SKILL.md", skill_md("weather").encode()), ("../evil.sh", b"rm -rf /")])
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(data=data, filename="w.zip", actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("../evil.sh", "path-traversal")}
    assert "../evil.sh" in caught.value.message
    assert snapshot() == before


def test_archive_with_duplicate_entries_refused(agent, system_actor, snapshot):
    # given two entries with one name
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("weather/SKILL.md", skill_md("weather"))
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr("weather/SKILL.md", skill_md("weather", description="other"))
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(
            data=buffer.getvalue(), filename="w.zip", actor=system_actor, agent=agent
        )
    assert _rules(caught.value) == {("weather/SKILL.md", "duplicate-path")}
    assert snapshot() == before


@pytest.mark.slow
def test_archive_of_100000_entries_refused(agent, system_actor, snapshot):
    # given
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("weather/SKILL.md", skill_md("weather"))
        for i in range(100_000):
            archive.writestr(f"weather/assets/{i}.txt", b"")
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(
            data=buffer.getvalue(), filename="many.zip", actor=system_actor, agent=agent
        )
    assert _rules(caught.value) == {("many.zip", "archive-too-many-entries")}
    assert snapshot() == before


def test_compression_bomb_refused(agent, system_actor, snapshot):
    # given 50 MB of zeros that compress to about 50 KB
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in [("weather/SKILL.md", skill_md("weather").encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("weather/assets/zeros.bin")
        info.size = 50 * MB
        archive.addfile(info, io.BytesIO(bytes(50 * MB)))
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(
            data=buffer.getvalue(), filename="bomb.tar.gz", actor=system_actor, agent=agent
        )
    assert _rules(caught.value) == {("weather/assets/zeros.bin", "archive-compression-ratio")}
    assert snapshot() == before


def test_archive_that_is_not_an_archive_refused(agent, system_actor, snapshot):
    before = snapshot()
    with pytest.raises(SkillValidationError) as caught:
        skill_import_archive(data=b"not a zip", filename="x.zip", actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("x.zip", "archive-corrupt")}
    assert snapshot() == before


def test_import_of_a_file_path_as_directory_refused(tmp_path: Path, system_actor, snapshot):
    # given
    path = tmp_path / "SKILL.md"
    path.write_text(skill_md("weather"))
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=path, actor=system_actor)
    assert caught.value.details["rule"] == "not-a-directory"
    assert snapshot() == before


def test_bad_policy_json_proposal_refuses_the_import(tmp_path: Path, agent, system_actor, snapshot):
    # given a policy.json proposing a tool that does not exist
    directory = write_skill(tmp_path, "weather", {"policy.json": '{"tools": ["sudo"]}'})
    before = snapshot()

    # when / then
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=directory, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("policy.json", "known_tool")}
    assert "unknown tool 'sudo'" in caught.value.message
    assert snapshot() == before


@pytest.mark.parametrize(
    "frontmatter",
    [
        'description: "a\\0b"',
        'description: ok\nmetadata: {k: "x\\0y"}',
        'description: ok\n"k\\0": v',
        'description: ok\nmetadata: {k: "\\ud800"}',
    ],
    ids=["nul-description", "nul-metadata", "nul-key", "lone-surrogate"],
)
def test_frontmatter_escapes_the_database_cannot_store_are_refused(
    frontmatter, agent, system_actor, snapshot
):
    # given frontmatter that PostgreSQL text/jsonb would reject with a DataError
    text = f"---\nname: weather\n{frontmatter}\n---\nbody\n"
    before = snapshot()

    # when / then a refusal naming the file and rule, not a database error
    with pytest.raises(SkillValidationError) as caught:
        skill_import_pasted(text=text, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {("SKILL.md", "frontmatter-invalid-char")}
    assert snapshot() == before


def test_non_utf8_directory_name_is_stored_escaped_in_the_provenance(
    tmp_path: Path, agent, system_actor
):
    # given a tree whose own directory name is not UTF-8 (Python sees a lone surrogate)
    root = Path(os.fsdecode(bytes(tmp_path) + b"/skills-\xff"))
    write_skill(root, "weather")

    # when
    [result] = skill_import_directory(path=root, actor=system_actor, agent=agent).installed

    # then the import works and the provenance shows the byte escaped
    assert result.version.provenance["source"] == str(tmp_path) + "/skills-\\udcff"


def test_archive_file_name_with_a_nul_is_stored_escaped(agent, system_actor):
    # when
    [result] = skill_import_archive(
        data=_zip([("SKILL.md", skill_md("weather").encode())]),
        filename="w\x00.zip",
        actor=system_actor,
        agent=agent,
    ).installed

    # then
    assert result.version.provenance["source"] == "w\\x00.zip"


def test_tree_holding_one_skill_twice_imports_nothing(
    tmp_path: Path, agent, system_actor, snapshot
):
    # given two directories "weather" at different places in one tree
    write_skill(tmp_path / "team-a", "weather")
    write_skill(tmp_path / "team-b", "weather", body="# other\n")
    before = snapshot()

    # when / then: neither copy is "the" weather skill
    with pytest.raises(SkillValidationError) as caught:
        skill_import_directory(path=tmp_path, actor=system_actor, agent=agent)
    assert _rules(caught.value) == {
        ("team-a/weather/SKILL.md", "duplicate_skill"),
        ("team-b/weather/SKILL.md", "duplicate_skill"),
    }
    assert "team-b/weather" in caught.value.message
    assert snapshot() == before
