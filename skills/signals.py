"""Signals the skills app sends for the apps above it (which it must not import)."""

from __future__ import annotations

import django.dispatch

#: sent after the commit that installed a new skill version; kwargs: version_id (int)
version_installed = django.dispatch.Signal()
