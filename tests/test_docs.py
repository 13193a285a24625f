"""The documentation stays true to the code: docs/architecture.md states the import contracts
pyproject.toml enforces, names every room that exists, and no relative link in the README or
docs/ points at a file that is not there.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def _documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_architecture_states_the_layers_in_the_enforced_order() -> None:
    # given the layers contract of pyproject.toml, from the top
    (layers,) = [c["layers"] for c in _contracts() if c["type"] == "layers"]
    # then docs/architecture.md states the same order
    stated = " → ".join(f"`{name}`" for name in layers)
    assert stated in ARCHITECTURE.read_text()


def test_architecture_names_what_the_sandbox_may_not_import() -> None:
    # given the forbidden contract on sandbox
    (forbidden,) = [
        c["forbidden_modules"]
        for c in _contracts()
        if c["type"] == "forbidden" and c["source_modules"] == ["sandbox"]
    ]
    text = ARCHITECTURE.read_text()
    # then the section on import direction names every forbidden module
    section = text.split("## Which way imports point", 1)[1].split("\n## ", 1)[0]
    assert [name for name in forbidden if f"`{name}`" not in section] == []


def test_architecture_has_a_row_for_every_room() -> None:
    # given the project's packages and the benchmark and test directories
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    rooms = [*config["tool"]["importlinter"]["root_packages"], "tests", "bench"]
    rows = re.findall(r"^\| `([a-z_]+)/` \|", ARCHITECTURE.read_text(), flags=re.M)
    # then the rooms table lists each of them, and only directories that exist
    assert sorted(rows) == sorted(rooms)
    assert all((ROOT / room).is_dir() for room in rows)


def test_relative_links_of_the_docs_point_at_files() -> None:
    # given every Markdown link of the README, bench/README.md and docs/ that is not a URL
    broken = []
    for document in _documents():
        for target in re.findall(r"\]\(([^)]+)\)", document.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path = target.split("#", 1)[0]
            # then it names a file next to the document that links it
            if path and not (document.parent / path).exists():
                broken.append(f"{document.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_the_readme_links_every_document_of_docs() -> None:
    # given the topic documents of docs/
    readme = (ROOT / "README.md").read_text()
    documents = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    # then the README's documentation table links each one
    assert [name for name in documents if f"(docs/{name})" not in readme] == []


def test_the_readme_tool_table_is_the_one_generated_from_the_manifests() -> None:
    from skills.toolpolicy.table import manifest_table

    # given the table the manifests produce, when the README is read, then it holds that table
    assert manifest_table() in (ROOT / "README.md").read_text()
