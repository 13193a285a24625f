"""Conversations of the built-in brain in the admin: read-only, for audit (what the brain was
told, what it called, what it answered). Changes happen in the chat or through the API."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from .models import BrainWake, Conversation, Message


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(admin.TabularInline):
    model = Message
    fields = ("created_at", "role", "trigger", "text", "tool_name", "tool_result", "event")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(_ReadOnly):
    list_display = ("id", "title", "agent", "user", "status", "updated_at", "chat_link")
    list_filter = ("status",)
    search_fields = ("title", "agent__name", "user__username")
    readonly_fields = (
        "agent",
        "user",
        "title",
        "status",
        "pending_run_id",
        "pending_question",
        "pending_tool_call_id",
        "created_at",
        "updated_at",
    )
    inlines = [MessageInline]

    @admin.display(description="Chat")
    def chat_link(self, obj: Conversation) -> str:
        return format_html('<a href="{}">open</a>', reverse("chat-detail", args=[obj.pk]))


@admin.register(BrainWake)
class BrainWakeAdmin(_ReadOnly):
    list_display = ("signal", "state", "outcome", "conversation", "created_at", "handled_at")
    list_filter = ("state", "outcome")
    readonly_fields = ("signal", "conversation", "state", "outcome", "created_at", "handled_at")
