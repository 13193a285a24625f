"""Errors of the built-in brain (mapped to HTTP statuses by the API's exception handler)."""

from __future__ import annotations

from cognition.errors import CognitionError


class ConversationNotFound(CognitionError):
    """No such conversation, or one the caller may not see (never told apart)."""

    code = "conversation_not_found"
    http_status = 404


class ConversationBusy(CognitionError):
    """Another turn of this conversation is running; try again when it has finished."""

    code = "conversation_busy"
    http_status = 409


class MessageInvalid(CognitionError):
    """A user message breaks a rule (`details`: field, rule)."""

    code = "message_invalid"
