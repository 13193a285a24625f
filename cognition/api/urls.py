"""Routes of /api/v1/ (mounted in config/urls.py)."""

from __future__ import annotations

from django.urls import path

from . import (
    artifacts,
    audit,
    conversations,
    energy,
    mcp_servers,
    runs,
    schedules,
    signals,
    skill_search,
    skillforge,
    views,
    webhooks,
)

app_name = "api"

# Skill names are lowercase letters, digits and hyphens (skills.bundle's install rule).
urlpatterns = [
    path("skills/", views.SkillListView.as_view(), name="skill-list"),
    # before skills/<name>/: without ?q= it serves the skill named "search" (skill_search.py)
    path(
        "skills/search/",
        skill_search.SkillSearchView.as_view(),
        {"name": skill_search.SEARCH_NAME},
        name="skill-search",
    ),
    path("skills/<str:name>/", views.SkillDetailView.as_view(), name="skill-detail"),
    path("skills/<str:name>/review/", views.SkillReviewView.as_view(), name="skill-review"),
    path("skills/<str:name>/approve/", views.SkillApproveView.as_view(), name="skill-approve"),
    path("skills/<str:name>/reject/", views.SkillRejectView.as_view(), name="skill-reject"),
    path("skills/<str:name>/update/", views.SkillUpdateView.as_view(), name="skill-update"),
    path("skillforge/", skillforge.FlowListView.as_view(), name="skillforge-list"),
    path(
        "skillforge/<str:flow_id>/", skillforge.FlowDetailView.as_view(), name="skillforge-detail"
    ),
    path(
        "skillforge/<str:flow_id>/answer/",
        skillforge.FlowAnswerView.as_view(),
        name="skillforge-answer",
    ),
    path(
        "skillforge/<str:flow_id>/deploy/",
        skillforge.FlowDeployView.as_view(),
        name="skillforge-deploy",
    ),
    path(
        "skillforge/<str:flow_id>/decline/",
        skillforge.FlowDeclineView.as_view(),
        name="skillforge-decline",
    ),
    path(
        "skillforge/<str:flow_id>/cancel/",
        skillforge.FlowCancelView.as_view(),
        name="skillforge-cancel",
    ),
    path("credentials/", views.CredentialListView.as_view(), name="credential-list"),
    path("credentials/<str:name>/", views.CredentialDetailView.as_view(), name="credential-detail"),
    path("agents/", views.AgentListView.as_view(), name="agent-list"),
    path("agents/me/", views.AgentMeView.as_view(), name="agent-me"),
    path("agents/<str:ref>/token/", views.AgentTokenView.as_view(), name="agent-token"),
    path(
        "agents/<str:ref>/energy/restore/",
        energy.AgentEnergyRestoreView.as_view(),
        name="agent-energy-restore",
    ),
    path("agents/<str:ref>/webhook/", webhooks.AgentWebhookView.as_view(), name="agent-webhook"),
    path(
        "agents/<str:ref>/webhook/rotate/",
        webhooks.AgentWebhookRotateView.as_view(),
        name="agent-webhook-rotate",
    ),
    path("tokens/", views.PersonalTokenListView.as_view(), name="token-list"),
    path("tokens/<int:token_id>/", views.PersonalTokenDetailView.as_view(), name="token-detail"),
    path("runs/", runs.RunListView.as_view(), name="run-list"),
    path("runs/<str:run_id>/", runs.RunDetailView.as_view(), name="run-detail"),
    path("runs/<str:run_id>/respond/", runs.RunRespondView.as_view(), name="run-respond"),
    path("runs/<str:run_id>/cancel/", runs.RunCancelView.as_view(), name="run-cancel"),
    path("runs/<str:run_id>/approve/", runs.RunApproveView.as_view(), name="run-approve"),
    path("runs/<str:run_id>/reject/", runs.RunRejectView.as_view(), name="run-reject"),
    path("runs/<str:run_id>/retry/", runs.RunRetryView.as_view(), name="run-retry"),
    path("runs/<str:run_id>/log/", runs.RunLogView.as_view(), name="run-log"),
    path(
        "runs/<str:run_id>/artifacts/",
        artifacts.RunArtifactListView.as_view(),
        name="run-artifact-list",
    ),
    path(
        "runs/<str:run_id>/artifacts/<path:path>",
        artifacts.RunArtifactDownloadView.as_view(),
        name="run-artifact-download",
    ),
    path("oneshot/", runs.OneshotView.as_view(), name="oneshot"),
    path("tools/", runs.ToolListView.as_view(), name="tool-list"),
    path("mcp-servers/", mcp_servers.McpServerListView.as_view(), name="mcp-server-list"),
    path(
        "mcp-servers/<str:skill>/",
        mcp_servers.McpServerDetailView.as_view(),
        name="mcp-server-detail",
    ),
    path(
        "mcp-servers/<str:skill>/code/",
        mcp_servers.McpServerCodeView.as_view(),
        name="mcp-server-code",
    ),
    path(
        "mcp-servers/<str:skill>/disable/",
        mcp_servers.McpServerDisableView.as_view(),
        name="mcp-server-disable",
    ),
    path(
        "mcp-servers/<str:skill>/enable/",
        mcp_servers.McpServerEnableView.as_view(),
        name="mcp-server-enable",
    ),
    path("tools/manifests/", audit.ToolManifestListView.as_view(), name="tool-manifest-list"),
    path("audit/", audit.AuditListView.as_view(), name="audit-list"),
    path("schedules/", schedules.ScheduleListView.as_view(), name="schedule-list"),
    path(
        "schedules/<int:schedule_id>/",
        schedules.ScheduleDetailView.as_view(),
        name="schedule-detail",
    ),
    path(
        "schedules/<int:schedule_id>/enable/",
        schedules.ScheduleEnableView.as_view(),
        name="schedule-enable",
    ),
    path(
        "schedules/<int:schedule_id>/disable/",
        schedules.ScheduleDisableView.as_view(),
        name="schedule-disable",
    ),
    path(
        "schedules/<int:schedule_id>/occurrences/",
        schedules.ScheduleOccurrenceListView.as_view(),
        name="schedule-occurrences",
    ),
    path(
        "conversations/",
        conversations.ConversationListView.as_view(),
        name="conversation-list",
    ),
    path(
        "conversations/<int:conversation_id>/",
        conversations.ConversationDetailView.as_view(),
        name="conversation-detail",
    ),
    path(
        "conversations/<int:conversation_id>/messages/",
        conversations.ConversationMessagesView.as_view(),
        name="conversation-messages",
    ),
    path("signals/", signals.SignalListView.as_view(), name="signal-list"),
    path("signals/stream/", signals.SignalStreamView.as_view(), name="signal-stream"),
]
