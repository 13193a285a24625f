"""Where a brain that lives inside this process (the built-in Cognition) asks to hear signals.

Signal delivery (cognition.delivery) calls every registered hook once per committed signal, from
a Celery task, with the signal's id. A hook must be quick and idempotent: delivery is at least
once, so the same id can arrive twice.
"""

from __future__ import annotations

from collections.abc import Callable

BrainHook = Callable[[int], None]

_hooks: dict[str, BrainHook] = {}


def register_brain_hook(name: str, hook: BrainHook) -> None:
    """Register `hook` under `name` (registering a name again replaces the hook)."""
    _hooks[name] = hook


def unregister_brain_hook(name: str) -> None:
    _hooks.pop(name, None)


def brain_hooks() -> dict[str, BrainHook]:
    """The registered hooks by name (a copy)."""
    return dict(_hooks)
