"""Run artifacts in the admin: a read-only list and a streamed download for staff.

Downloading needs the same permission as viewing runs (``runs.view_motorrun``); the file is
looked up by its row, and served as an attachment, never rendered inline.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from runs.artifacts import ArtifactNotFound, artifact_open
from runs.models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("path", "run_link", "size", "mime", "created_at", "download_link")
    list_filter = ("mime",)
    search_fields = ("run__id", "path", "sha256")
    readonly_fields = ("run", "name", "path", "size", "sha256", "mime", "created_at")
    list_select_related = ("run",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and user.has_perm("runs.view_motorrun"))

    @admin.display(description="Run")
    def run_link(self, item: Artifact) -> str:
        url = reverse("admin:runs_motorrun_change", args=[quote(item.run_id)])
        return format_html('<a href="{}">{}</a>', url, item.run_id)

    @admin.display(description="Download")
    def download_link(self, item: Artifact) -> str:
        url = reverse("admin:runs_artifact_download", args=[item.pk])
        return format_html('<a href="{}">download</a>', url)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.download_view)
        return [
            path("<int:artifact_id>/download/", view, name="runs_artifact_download"),
            *super().get_urls(),
        ]

    def download_view(self, request: HttpRequest, artifact_id: int) -> FileResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        item = get_object_or_404(Artifact.objects.select_related("run"), pk=artifact_id)
        try:
            item, handle = artifact_open(run=item.run, path=item.path)
        except ArtifactNotFound as exc:
            raise Http404(exc.message) from None
        response = FileResponse(
            handle, as_attachment=True, filename=item.name, content_type=item.mime
        )
        response["Content-Length"] = str(item.size)
        return response
