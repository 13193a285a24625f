"""The console of deployed MCP skills: list (status, tool count, failure rate), the code of the
deployed version read-only, and disable / enable / remove through the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from forge import selectors, services
from forge.errors import ServerStateError
from forge.models import DeployedServer, McpTool


class McpToolInline(admin.TabularInline):
    model = McpTool
    extra = 0
    can_delete = False
    fields = ("qualified_name", "semantics", "description", "calls", "failures", "last_error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(DeployedServer)
class DeployedServerAdmin(admin.ModelAdmin):
    list_display = (
        "skill",
        "version_number",
        "status",
        "tool_count",
        "failure_rate_shown",
        "created_at",
    )
    list_filter = ("status",)
    search_fields = ("skill__name",)
    inlines = (McpToolInline,)
    actions = ("disable_servers", "enable_servers", "remove_servers")
    readonly_fields = (
        "skill",
        "version",
        "agent",
        "status",
        "status_by",
        "status_at",
        "content_hash",
        "allowed_domains",
        "credentials",
        "limits",
        "crash_count",
        "failure",
        "recent",
        "deployed_by",
        "created_at",
        "code",
    )
    exclude = ("failing_signalled_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # removal is the "remove" action: the server stops, the rows stay

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeployedServer]:
        return super().get_queryset(request).select_related("skill", "version")

    @admin.display(description="version")
    def version_number(self, obj: DeployedServer) -> int:
        return obj.version.number

    @admin.display(description="tools")
    def tool_count(self, obj: DeployedServer) -> int:
        return obj.tools.count()

    @admin.display(description="failure rate")
    def failure_rate_shown(self, obj: DeployedServer) -> str:
        rate = obj.failure_rate
        return "-" if rate is None else f"{rate:.0%} of {len(obj.recent)}"

    @admin.display(description="code (read-only)")
    def code(self, obj: DeployedServer) -> str:
        files = selectors.server_code(obj)
        return format_html_join(
            "", "<h4>{}</h4><pre style='white-space: pre-wrap'>{}</pre>", files.items()
        ) or format_html("<p>{}</p>", "no files")

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[DeployedServer], action: Any, done: str
    ) -> None:
        label = f"admin:{request.user.get_username()}"
        for server in queryset:
            try:
                action(server.skill_id, actor=label)
            except ServerStateError as exc:
                self.message_user(request, f"{server.skill.name}: {exc.message}", messages.WARNING)
            else:
                self.message_user(request, f"{server.skill.name}: {done}", messages.SUCCESS)

    @admin.action(description="Disable (stop offering the tools, stop the server)")
    def disable_servers(self, request: HttpRequest, queryset: QuerySet[DeployedServer]) -> None:
        self._apply(request, queryset, services.server_disable, "disabled")

    @admin.action(description="Enable")
    def enable_servers(self, request: HttpRequest, queryset: QuerySet[DeployedServer]) -> None:
        self._apply(request, queryset, services.server_enable, "enabled")

    @admin.action(description="Remove (stop the server; the history stays)")
    def remove_servers(self, request: HttpRequest, queryset: QuerySet[DeployedServer]) -> None:
        def remove(skill_id: int, *, actor: str) -> None:
            services.undeploy(skill_id, actor=actor, reason=f"removed by {actor}")

        self._apply(request, queryset, remove, "removed")


# The SkillForge flows' console (one job per file); importing it registers it.
from forge import admin_flows  # noqa: E402, F401
