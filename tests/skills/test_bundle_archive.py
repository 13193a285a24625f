"""Skills uploaded as archives: every entry is checked before anything is returned."""

from __future__ import annotations

import gzip
import io
import stat
import struct
import tarfile
import warnings
import zipfile

import pytest

from skills.bundle import BundleError, BundleLimits, bundles_from_archive


def skill_md(name: str) -> bytes:
    return f"---\nname: {name}\ndescription: The {name} skill.\n---\n# {name}\n".encode()


def make_zip(entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicates we build on purpose
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, data in entries:
                archive.writestr(name, data)
    return buffer.getvalue()


def tar_entry(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.linkname = link
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def make_tar(entries, mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for info, fileobj in entries:
            archive.addfile(info, fileobj)
    return buffer.getvalue()


def archive_problems(data: bytes, filename: str, **limits) -> list[tuple[str, str]]:
    with pytest.raises(BundleError) as info:
        bundles_from_archive(data, filename=filename, limits=BundleLimits(**limits))
    return [(p.path, p.rule) for p in info.value.problems]


# -- good archives ------------------------------------------------------------------------------


def test_zip_with_one_skill_directory():
    # given a zip holding demo/ with SKILL.md, a script and a policy.json
    data = make_zip(
        [
            ("demo/", b""),
            ("demo/SKILL.md", skill_md("demo")),
            ("demo/scripts/run.sh", b"echo hi\n"),
            ("demo/policy.json", b'{"trust": "approved"}'),
        ]
    )

    # when it is read
    bundles, errors = bundles_from_archive(data, filename="demo.zip")

    # then the skill is valid, the policy is only declared
    assert errors == []
    [bundle] = bundles
    assert bundle.name == "demo"
    assert [f.path for f in bundle.files] == ["SKILL.md", "scripts/run.sh"]
    assert bundle.declared_policy == {"trust": "approved"}


def test_tar_gz_with_skill_at_the_top_and_dot_slash_names():
    data = make_tar(
        [
            tar_entry("./", kind=tarfile.DIRTYPE),
            tar_entry("./SKILL.md", skill_md("top")),
            tar_entry("./references/a.md", b"# A\n"),
        ]
    )
    bundles, errors = bundles_from_archive(data, filename="top.tgz")
    assert errors == []
    assert [(b.name, [f.path for f in b.files]) for b in bundles] == [
        ("top", ["SKILL.md", "references/a.md"])
    ]


def test_archive_of_many_skills_returns_valid_ones_and_errors_for_the_rest():
    data = make_tar(
        [
            tar_entry("skills/alpha/SKILL.md", skill_md("alpha")),
            tar_entry("skills/beta/SKILL.md", skill_md("wrong-name")),
            tar_entry("skills/gamma/SKILL.md", skill_md("gamma")),
            tar_entry("skills/gamma/references/nested/SKILL.md", skill_md("nested")),
        ],
        mode="w",
    )
    bundles, errors = bundles_from_archive(data, filename="many.tar")
    assert [b.name for b in bundles] == ["alpha", "gamma"]
    assert [f.path for f in bundles[1].files] == ["SKILL.md", "references/nested/SKILL.md"]
    assert [(key, exc.rules) for key, exc in errors] == [("skills/beta", ["name-dir-mismatch"])]


def test_denylisted_entries_are_not_read():
    data = make_zip(
        [
            ("demo/SKILL.md", skill_md("demo")),
            ("demo/node_modules/big.js", b"x" * 2_000_000),
        ]
    )
    [bundle], errors = bundles_from_archive(data, filename="demo.zip")
    assert errors == []
    assert [(f.path, f.rule) for f in bundle.findings] == [("node_modules/", "path-denylisted")]


# -- refused archives ---------------------------------------------------------------------------


def test_dot_dot_inside_a_zip_refuses_the_whole_archive():
    data = make_zip(
        [
            ("good/SKILL.md", skill_md("good")),
            (zipfile.ZipInfo("../../etc/cron.d/evil"), b"* * * * * root sh"),
        ]
    )
    assert archive_problems(data, "x.zip") == [("../../etc/cron.d/evil", "path-traversal")]


def test_dot_dot_inside_a_tar_refuses_the_whole_archive():
    data = make_tar(
        [
            tar_entry("good/SKILL.md", skill_md("good")),
            tar_entry("good/../../evil.sh", b"rm -rf /"),
            tar_entry("/etc/passwd", b"root::0:0"),
        ]
    )
    assert archive_problems(data, "x.tar.gz") == [
        ("good/../../evil.sh", "path-traversal"),
        ("/etc/passwd", "path-absolute"),
    ]


def test_links_and_devices_in_a_tar_are_refused():
    data = make_tar(
        [
            tar_entry("demo/SKILL.md", skill_md("demo")),
            tar_entry("demo/references/pw.md", kind=tarfile.SYMTYPE, link="/etc/passwd"),
            tar_entry("demo/references/hl.md", kind=tarfile.LNKTYPE, link="demo/SKILL.md"),
            tar_entry("demo/assets/null", kind=tarfile.CHRTYPE),
            tar_entry("demo/assets/pipe", kind=tarfile.FIFOTYPE),
        ]
    )
    assert archive_problems(data, "x.tgz") == [
        ("demo/references/pw.md", "symlink"),
        ("demo/references/hl.md", "hardlink"),
        ("demo/assets/null", "special-file"),
        ("demo/assets/pipe", "special-file"),
    ]


def test_symlink_in_a_zip_is_refused():
    link = zipfile.ZipInfo("demo/references/pw.md")
    link.create_system = 3
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    data = make_zip([("demo/SKILL.md", skill_md("demo")), (link, b"/etc/passwd")])
    assert archive_problems(data, "x.zip") == [("demo/references/pw.md", "symlink")]


def test_duplicate_entries_are_refused_in_zip_and_tar():
    zipped = make_zip(
        [
            ("demo/SKILL.md", skill_md("demo")),
            ("demo/scripts/a.sh", b"1"),
            ("demo/scripts/a.sh", b"2"),
        ]
    )
    tarred = make_tar(
        [
            tar_entry("demo/SKILL.md", skill_md("demo")),
            tar_entry("demo/SKILL.md", skill_md("other")),
        ]
    )
    assert archive_problems(zipped, "x.zip") == [("demo/scripts/a.sh", "duplicate-path")]
    assert archive_problems(tarred, "x.tgz") == [("demo/SKILL.md", "duplicate-path")]


def zip_of_empty_files(count: int) -> bytes:
    """A ZIP64 archive of `count` empty stored files, written record by record.

    Going through zipfile would take most of a minute for 100,000 entries; the records are
    simple enough to write directly (APPNOTE 4.3.7, 4.3.12, 4.3.14-16).
    """
    local = bytearray()
    central = bytearray()
    for i in range(count):
        name = f"f{i}".encode()
        offset = len(local)
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0)
        local += name
        central += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 45, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0,
            0, offset,
        )  # fmt: skip
        central += name
    zip64_end_at = len(local) + len(central)
    zip64_end = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(central), len(local)
    )
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, zip64_end_at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(local + central + zip64_end + locator + end)


def test_archive_of_100000_entries_is_refused_before_it_is_parsed():
    # given a zip of 100,000 empty files (the builder is checked against zipfile below)
    data = zip_of_empty_files(100_000)

    # when / then it is refused from the end record, naming the count
    with pytest.raises(BundleError) as info:
        bundles_from_archive(data, filename="many.zip")
    assert [(p.path, p.rule) for p in info.value.problems] == [
        ("many.zip", "archive-too-many-entries")
    ]
    assert info.value.problems[0].message == "100,000 entries; the limit is 2,000"


def test_zip_whose_end_record_understates_its_entries_is_still_refused():
    # given an end record that claims 3 entries while the directory holds 3,000
    data = bytearray(zip_of_empty_files(3_000))
    assert len(zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()) == 3_000
    zip64_total = data.rfind(b"PK\x06\x06") + 24
    data[zip64_total : zip64_total + 16] = struct.pack("<2Q", 3, 3)

    # when / then the parsed directory is counted too
    assert archive_problems(bytes(data), "liar.zip") == [("liar.zip", "archive-too-many-entries")]


def test_tar_with_too_many_entries_stops_while_streaming():
    entries = [tar_entry("demo/SKILL.md", skill_md("demo"))]
    entries += [tar_entry(f"demo/references/{i}.md", b"") for i in range(50)]
    assert archive_problems(make_tar(entries), "x.tgz", max_archive_entries=20) == [
        ("x.tgz", "archive-too-many-entries")
    ]


def test_zip_bomb_of_50_mb_zeros_is_refused():
    # given 50 MB of zeros deflated to about 50 KB
    data = make_zip(
        [("demo/SKILL.md", skill_md("demo")), ("demo/assets/zeros.bin", b"\0" * 50_000_000)]
    )
    assert len(data) < 100_000

    # when / then: refused from the declared sizes, before any of it is unpacked; the ratio
    # refusal names the entry
    assert archive_problems(data, "bomb.zip") == [
        ("bomb.zip", "archive-too-large"),
        ("demo/assets/zeros.bin", "archive-compression-ratio"),
    ]


def test_tar_gz_bomb_is_stopped_while_decompressing():
    # given a gzip stream of 50 MB of zeros inside a tar (no upfront size to check)
    member = tarfile.TarInfo("demo/assets/zeros.bin")
    member.size = 50_000_000
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        archive.addfile(tarfile.TarInfo("demo/SKILL.md"), io.BytesIO(b""))
        archive.addfile(member, io.BytesIO(b"\0" * member.size))
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as gz:
        gz.write(raw.getvalue())
    data = buffer.getvalue()

    # when / then: the stream is cut off once the ratio is exceeded, naming the entry
    assert archive_problems(data, "bomb.tar.gz") == [
        ("demo/assets/zeros.bin", "archive-compression-ratio")
    ]


def test_many_small_files_over_the_total_are_stopped_while_reading():
    # given 12 files of 900 KB (each allowed) of random-ish data: 10.8 MB in total
    chunk = bytes(range(256)) * 3516
    entries = [tar_entry("demo/SKILL.md", skill_md("demo"))]
    entries += [tar_entry(f"demo/assets/{i}.bin", chunk) for i in range(12)]
    assert archive_problems(make_tar(entries, mode="w"), "big.tar") == [
        ("big.tar", "archive-too-large")
    ]


def mark_encrypted(data: bytes, name: bytes) -> bytes:
    """Set the "encrypted" flag of entry `name` in its local and central headers."""
    patched = bytearray(data)
    for signature, flag_offset, name_offset in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        pos = patched.find(signature)
        while pos >= 0 and patched[pos + name_offset : pos + name_offset + len(name)] != name:
            pos = patched.find(signature, pos + 1)
        patched[pos + flag_offset] |= 0x1
    return bytes(patched)


def test_password_protected_zip_entry_is_refused():
    data = make_zip([("demo/SKILL.md", skill_md("demo")), ("demo/assets/secret.bin", b"xx")])
    data = mark_encrypted(data, b"demo/assets/secret.bin")
    assert archive_problems(data, "x.zip") == [("demo/assets/secret.bin", "archive-encrypted")]


def test_unknown_or_corrupt_archives_are_refused():
    assert archive_problems(b"hello", "notes.rar") == [("notes.rar", "archive-format")]
    assert archive_problems(b"PK\x03\x04garbage", "x.zip") == [("x.zip", "archive-corrupt")]
    assert archive_problems(b"\x1f\x8bnot gzip", "x.tgz") == [("x.tgz", "archive-corrupt")]


def test_archive_without_any_skill_is_refused():
    data = make_zip([("README.md", b"hi")])
    assert archive_problems(data, "x.zip") == [("x.zip", "skill-md-missing")]


def test_oversized_file_in_an_archive_refuses_only_its_skill():
    # given two skills, one with a 1.1 MB (incompressible enough) reference
    big = bytes(range(256)) * 4300
    data = make_tar(
        [
            tar_entry("first/SKILL.md", skill_md("wrong")),
            tar_entry("second/SKILL.md", skill_md("second")),
            tar_entry("second/references/big.md", big),
        ],
        mode="w",
    )
    bundles, errors = bundles_from_archive(data, filename="two.tar")
    assert bundles == []
    assert [(key, [(p.path, p.rule) for p in exc.problems]) for key, exc in errors] == [
        ("first", [("SKILL.md", "name-dir-mismatch")]),
        ("second", [("references/big.md", "file-too-large")]),
    ]


def test_repeated_directory_entries_are_harmless_but_file_and_directory_clash():
    repeated = make_zip([("dd/", b""), ("dd/", b""), ("dd/SKILL.md", skill_md("dd"))])
    [bundle], errors = bundles_from_archive(repeated, filename="ok.zip")
    assert (bundle.name, errors) == ("dd", [])

    clash = make_tar(
        [
            tar_entry("dd/SKILL.md", skill_md("dd")),
            tar_entry("dd/scripts", b"file"),
            tar_entry("dd/scripts", kind=tarfile.DIRTYPE),
        ]
    )
    assert archive_problems(clash, "x.tgz") == [("dd/scripts", "path-conflict")]


def test_operating_system_litter_in_uploads_is_skipped():
    # given a zip made by macOS Finder: __MACOSX resource forks and .DS_Store files
    data = make_zip(
        [
            ("demo/SKILL.md", skill_md("demo")),
            ("demo/scripts/.DS_Store", b"\0\0\0\1Bud1"),
            ("demo/scripts/run.sh", b"echo\n"),
            ("__MACOSX/demo/._SKILL.md", b"\0\5\26\7"),
        ]
    )
    [bundle], errors = bundles_from_archive(data, filename="demo.zip")
    assert errors == []
    assert [f.path for f in bundle.files] == ["SKILL.md", "scripts/run.sh"]


def test_absolute_and_control_character_names_in_a_zip_are_refused():
    data = make_zip(
        [
            ("demo/SKILL.md", skill_md("demo")),
            (zipfile.ZipInfo("/tmp/evil.sh"), b"x"),
            (zipfile.ZipInfo("demo/scripts/\x1b[2Jclear.sh"), b"x"),
        ]
    )
    assert archive_problems(data, "x.zip") == [
        ("/tmp/evil.sh", "path-absolute"),
        ("demo/scripts/\\u001b[2Jclear.sh", "path-control-char"),
    ]


def test_fifo_entry_in_a_zip_is_refused():
    fifo = zipfile.ZipInfo("demo/scripts/pipe")
    fifo.create_system = 3
    fifo.external_attr = (stat.S_IFIFO | 0o644) << 16
    data = make_zip([("demo/SKILL.md", skill_md("demo")), (fifo, b"")])
    assert archive_problems(data, "x.zip") == [("demo/scripts/pipe", "special-file")]


def test_overlong_names_are_refused():
    data = make_tar([tar_entry("demo/SKILL.md", skill_md("demo")), tar_entry(f"demo/{'n' * 256}")])
    assert archive_problems(data, "x.tgz") == [(f"demo/{'n' * 256}", "path-too-long")]
