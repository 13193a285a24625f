"""Isolated tool execution with an enforced egress allowlist.

A plain Python library: it never imports Django, Celery, DRF or the project's apps (enforced by
import-linter in CI and by tests/sandbox/test_purity.py).
"""
