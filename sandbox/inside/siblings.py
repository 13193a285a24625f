"""Importing another in-sandbox module of this directory when it is first needed, on the host
and inside the sandbox alike."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from types import ModuleType


def _load_sibling(name: str) -> ModuleType:
    """Import the module `name` of this directory: on the host a member of this package; inside
    the sandbox a top-level module, from this directory, which BOOT, or supervisor.py and
    tools.py run as scripts, put first on sys.path."""
    if __package__:
        import importlib

        return importlib.import_module(f"{__package__}.{name}")
    directory = os.path.dirname(os.path.abspath(__file__))
    if sys.path[:1] != [directory]:
        raise ImportError(f"{name}: {directory} is not first on sys.path")
    module: ModuleType = __import__(name)
    return module
