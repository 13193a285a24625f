"""The supervisor's bytecode: compiled by the backends, used inside only while it matches."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from sandbox.inside.supervisor import INSIDE_MODULES, precompile
from sandbox.types import ExecRequest
from tests.sandbox.conftest import SandboxFactory

INSIDE = Path(__file__).resolve().parents[2] / "sandbox" / "inside"


def pyc_of(directory: Path, name: str) -> Path:
    return directory / "__pycache__" / f"{name}.{sys.implementation.cache_tag}.pyc"


def test_precompile_writes_checked_hash_bytecode_and_rewrites_only_what_changed(
    tmp_path: Path,
) -> None:
    # given a copy of the in-sandbox modules, without any bytecode
    inside = tmp_path / "inside"
    inside.mkdir()
    for name in INSIDE_MODULES:
        shutil.copy(INSIDE / f"{name}.py", inside / f"{name}.py")
    # when they are precompiled
    precompile(str(inside))
    # then each has checked-hash bytecode (flags 3) of exactly its source
    for name in INSIDE_MODULES:
        header = pyc_of(inside, name).read_bytes()[:16]
        source = (inside / f"{name}.py").read_bytes()
        assert header[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(header[4:8], "little") == 3
        assert header[8:16] == importlib.util.source_hash(source)
    # and when one source changes and they are precompiled again, only that one is rewritten
    before = {name: pyc_of(inside, name).stat().st_mtime_ns for name in INSIDE_MODULES}
    with (inside / "bridge.py").open("a") as fh:
        fh.write("\nCHANGED = True\n")
    precompile(str(inside))
    after = {name: pyc_of(inside, name).stat().st_mtime_ns for name in INSIDE_MODULES}
    assert [name for name in INSIDE_MODULES if after[name] != before[name]] == ["bridge"]
    new_source = (inside / "bridge.py").read_bytes()
    assert pyc_of(inside, "bridge").read_bytes()[8:16] == importlib.util.source_hash(new_source)


def test_a_missing_directory_is_left_alone(tmp_path: Path) -> None:
    precompile(str(tmp_path / "missing"))
    assert list(tmp_path.iterdir()) == []


def test_the_sandbox_uses_the_bytecode_of_the_current_sources(
    open_sandbox: SandboxFactory, backend_name: str
) -> None:
    # given a session (its backend compiled the in-sandbox modules when it was created)
    session = open_sandbox(backend_name)
    for name in INSIDE_MODULES:
        header = pyc_of(INSIDE, name).read_bytes()[:16]
        assert header[8:16] == importlib.util.source_hash((INSIDE / f"{name}.py").read_bytes())
    # when the sandbox's interpreter imports them as the supervisor's start does (and the
    # modules tools.py imports when they are first called)
    probe = (
        "import sys; sys.path.insert(0, '/opt/motor-cortex'); "
        "import supervisor, tools, tool_search, tool_fetch, tool_bash"
    )
    result = session.exec(
        ExecRequest(argv=["/usr/bin/python3", "-v", "-I", "-S", "-B", "-c", probe])
    )
    # then they come from that bytecode (-v names where each module's code object came from)
    tag = sys.implementation.cache_tag
    assert result.exit_code == 0
    loaded = [
        line.split("'")[1]
        for line in result.stderr.decode().splitlines()
        if line.startswith("# code object from '/opt/motor-cortex/")
    ]
    assert loaded == [
        f"/opt/motor-cortex/__pycache__/{name}.{tag}.pyc"
        for name in (
            "supervisor",
            "confine",
            "siblings",
            "protocol",
            "runner",
            "fileserver",
            "poller",
            "sweep",
            "tools",
            "tool_files",
            "tool_paths",
            "tool_search",
            "tool_fetch",
            "tool_bash",
        )
    ]
