"""The built-in Cognition (see cognition.brain.services)."""
