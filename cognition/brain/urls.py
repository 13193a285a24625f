"""Routes of the chat page (mounted at /chat/ in config/urls.py)."""

from __future__ import annotations

from django.contrib.auth.views import LogoutView
from django.urls import path

from . import views

urlpatterns = [
    path("", views.chat_index, name="chat-index"),
    path("login/", views.ChatLoginView.as_view(), name="chat-login"),
    path("logout/", LogoutView.as_view(next_page="chat-login"), name="chat-logout"),
    path("<int:conversation_id>/", views.chat_detail, name="chat-detail"),
    path("<int:conversation_id>/state/", views.chat_state, name="chat-state"),
    path("<int:conversation_id>/send/", views.chat_send, name="chat-send"),
    path(
        "<int:conversation_id>/skills/<str:name>/approve/",
        views.chat_approve_skill,
        name="chat-approve-skill",
    ),
    path(
        "<int:conversation_id>/runs/<str:run_id>/cancel/",
        views.chat_cancel_run,
        name="chat-cancel-run",
    ),
    path(
        "<int:conversation_id>/runs/<str:run_id>/approve/",
        views.chat_approve_run,
        name="chat-approve-run",
    ),
]
