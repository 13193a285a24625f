"""Importing the other in-sandbox modules of this directory lazily, in every way the supervisor
is started."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from types import ModuleType


def _load_sibling(name: str) -> ModuleType:
    """Import a module that sits next to this file, both on the host (as a package member)
    and inside the sandbox (where `BOOT` put this directory on sys.path, or where this file runs
    as a script under ``python3 -I``, so its directory is not on sys.path)."""
    if __package__:
        import importlib

        return importlib.import_module(f"{__package__}.{name}")
    directory = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] == directory:
        # started by BOOT: a plain import finds it first there (importlib.util is not needed)
        module: ModuleType = __import__(name)
        return module
    import importlib.util

    path = os.path.join(directory, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"motor_cortex_inside_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
