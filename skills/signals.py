"""Signals the skills app sends for the apps above it (which it must not import)."""

from __future__ import annotations

import django.dispatch

#: sent after the commit that installed a new skill version; kwargs: version_id (int)
version_installed = django.dispatch.Signal()

#: sent by `skills.approval.skill_approve` inside its transaction, after the policy was approved
#: (every face approves through it); kwargs: policy_id (int), actor (skills.services.Actor).
#: A receiver's exception rolls the approval back: both happen or neither.
policy_approved = django.dispatch.Signal()
