"""The files a run produced: listed with their facts, downloaded as a stream (owner only)."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.core_task import own_run
from runs.artifacts import ArtifactNotFound, artifact_listing, artifact_open

from .views import AGENT_PARAM, PrincipalAPIView, _errors


class ArtifactSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The file's base name.")
    path = serializers.CharField(help_text="Its path in the run's workspace; the download key.")
    size = serializers.IntegerField(help_text="Bytes.")
    sha256 = serializers.CharField(help_text="Hex digest of the bytes.")
    mime = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(help_text="When the purge deletes it.")


class ArtifactListSerializer(serializers.Serializer):
    results = ArtifactSerializer(many=True)


class RunArtifactListView(PrincipalAPIView):
    @extend_schema(
        operation_id="runs_artifacts_list",
        summary="The files the run produced that are still kept",
        parameters=[AGENT_PARAM],
        responses={200: ArtifactListSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = own_run(agent=self.scope_agent(request), run_id=run_id)
        return Response(ArtifactListSerializer({"results": artifact_listing(run)}).data)


class RunArtifactDownloadView(PrincipalAPIView):
    @extend_schema(
        operation_id="runs_artifacts_download",
        summary="Download one artifact (streamed, as an attachment)",
        parameters=[AGENT_PARAM],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="The file's bytes, with its MIME type."
            ),
            **_errors(401, 404),
        },
    )
    def get(self, request: Request, run_id: str, path: str) -> Any:
        run = own_run(agent=self.scope_agent(request), run_id=run_id)
        try:
            item, handle = artifact_open(run=run, path=path)
        except ArtifactNotFound as exc:
            raise exceptions.NotFound(exc.message) from None
        response = FileResponse(
            handle, as_attachment=True, filename=item.name, content_type=item.mime
        )
        response["Content-Length"] = str(item.size)
        response["X-Content-SHA256"] = item.sha256
        return response
