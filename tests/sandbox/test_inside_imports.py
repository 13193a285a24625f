"""The in-sandbox entry points load their own sibling modules, whatever else is on sys.path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

INSIDE = Path(__file__).resolve().parents[2] / "sandbox" / "inside"

# Loads an entry point the way ``python3 -I -B FILE`` does (run as a file, not as a package
# member), after putting `shadow` first on sys.path, where a module of the system's
# dist-packages with one of our names would be; then prints where each sibling came from (one
# the entry point loads when first needed is loaded the way it does that).
PROBE = """
import runpy, sys
sys.path.insert(0, {shadow!r})
entry = runpy.run_path({entry!r}, run_name="probe")
for name in {names!r}:
    module = sys.modules.get(name) or entry["_load_sibling"](name)
    print(name, module.__file__)
"""


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ("supervisor.py", ["protocol", "confine", "runner", "fileserver", "sweep", "poller"]),
        ("tools.py", ["tool_paths", "tool_files", "tool_search", "tool_fetch", "tool_bash"]),
    ],
)
def test_an_entry_point_run_as_a_file_loads_its_own_siblings_before_any_namesake(
    tmp_path: Path, entry: str, names: list[str]
) -> None:
    # given a directory ahead of ours on sys.path holding a namesake of every sibling module
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    for name in names:
        (shadow / f"{name}.py").write_text("raise ImportError('the namesake was loaded')\n")
    # when the entry point is run as a file by the sandbox's interpreter
    code = PROBE.format(shadow=str(shadow), entry=str(INSIDE / entry), names=names)
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-B", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # then every sibling is ours
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{name} {INSIDE / name}.py" for name in names]
