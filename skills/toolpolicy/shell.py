"""A skill's shell allowlist, as a policy stores it: plain names of programs the sandbox has.

The runtime passes the list to the sandbox library's bash validator (`validate_bash`) and to the
supervisor, which links only these programs into the command's PATH. Here, when a policy is
saved, each name is checked against the same rules and against the programs present in the
sandbox's read-only /usr (bwrap binds the host's; the same directories are searched).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from sandbox.inside.tool_bash import BIN_DIRS
from sandbox.tools.bash import allowlist_from


def _present(name: str, directories: Sequence[str]) -> bool:
    for directory in directories:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return True
    return False


def allowlist_problems(names: Iterable[str], *, directories: Sequence[str] = BIN_DIRS) -> list[str]:
    """One sentence per entry that may not be allowlisted (empty: the list is usable)."""
    problems: list[str] = []
    for name in names:
        if not isinstance(name, str):
            problems.append(f"{name!r} is not a string")
            continue
        try:
            allowlist_from([name])
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if not _present(name, directories):
            problems.append(
                f"{name!r} does not exist in the sandbox (searched {', '.join(directories)})"
            )
    return problems
