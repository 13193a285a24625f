"""sandbox/ is a plain library: no module in it may import Django, Celery, DRF or the apps."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SANDBOX = Path(__file__).resolve().parents[2] / "sandbox"
FORBIDDEN = {"django", "celery", "rest_framework", "kombu", "skills", "runs", "cognition", "config"}


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_sandbox_module_imports_a_forbidden_package() -> None:
    offenders = {
        str(p.relative_to(SANDBOX)): sorted(_imported_roots(p) & FORBIDDEN)
        for p in SANDBOX.rglob("*.py")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}


def test_importing_sandbox_loads_no_django_or_celery() -> None:
    # given a fresh interpreter, when the whole package is imported,
    # then neither django nor celery ended up in sys.modules
    code = (
        "import importlib, pkgutil, sys, sandbox\n"
        "for m in pkgutil.walk_packages(sandbox.__path__, 'sandbox.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in "
        "{'django','celery','rest_framework','kombu'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=SANDBOX.parent,
    )
    assert out.stdout.strip() == "[]"
