"""/api/v1/mcp-servers/: the deployed MCP skills of the caller's agent — list (status, tool
count, failure rate), show, code (read-only), disable, enable, remove."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from cognition.api.views import PrincipalAPIView, _errors
from forge import selectors
from forge.services import server_disable, server_enable, undeploy


class McpServerListView(PrincipalAPIView):
    @extend_schema(
        operation_id="mcp_servers_list",
        summary="The agent's deployed MCP skills with status, tool count and failure rate",
        responses={200: OpenApiResponse(description="A list of servers"), **_errors(401, 404)},
    )
    def get(self, request: Request) -> Response:
        agent = self.scope_agent(request)
        return Response([selectors.server_dict(s) for s in selectors.servers_for(agent.pk)])


class McpServerDetailView(PrincipalAPIView):
    @extend_schema(
        operation_id="mcp_servers_read",
        summary="One deployed MCP skill, its tools and their usage",
        responses={200: OpenApiResponse(description="The server"), **_errors(401, 404)},
    )
    def get(self, request: Request, skill: str) -> Response:
        agent = self.scope_agent(request)
        return Response(selectors.server_dict(selectors.server_of(skill, agent.pk)))

    @extend_schema(
        operation_id="mcp_servers_remove",
        summary="Remove a deployed MCP skill (its server stops; the rows stay as history)",
        responses={204: None, **_errors(401, 404)},
    )
    def delete(self, request: Request, skill: str) -> Response:
        agent = self.scope_agent(request)
        server = selectors.server_of(skill, agent.pk)
        undeploy(server.skill_id, actor=self.actor(request).label, reason="removed through the API")
        return Response(status=204)


class McpServerCodeView(PrincipalAPIView):
    @extend_schema(
        operation_id="mcp_servers_code",
        summary="The deployed version's files (read-only)",
        responses={200: OpenApiResponse(description="{path: text}"), **_errors(401, 404)},
    )
    def get(self, request: Request, skill: str) -> Response:
        agent = self.scope_agent(request)
        return Response(selectors.server_code(selectors.server_of(skill, agent.pk)))


class McpServerDisableView(PrincipalAPIView):
    @extend_schema(
        operation_id="mcp_servers_disable",
        summary="Stop offering a deployed MCP skill's tools and stop its server",
        request=None,
        responses={200: OpenApiResponse(description="The server"), **_errors(401, 404, 409)},
    )
    def post(self, request: Request, skill: str) -> Response:
        agent = self.scope_agent(request)
        server = selectors.server_of(skill, agent.pk)
        server_disable(server.skill_id, actor=self.actor(request).label)
        return Response(selectors.server_dict(selectors.server_of(skill, agent.pk)))


class McpServerEnableView(PrincipalAPIView):
    @extend_schema(
        operation_id="mcp_servers_enable",
        summary="Offer a disabled or failed MCP skill's tools again (its server starts on use)",
        request=None,
        responses={200: OpenApiResponse(description="The server"), **_errors(401, 404, 409)},
    )
    def post(self, request: Request, skill: str) -> Response:
        agent = self.scope_agent(request)
        server = selectors.server_of(skill, agent.pk)
        server_enable(server.skill_id, actor=self.actor(request).label)
        return Response(selectors.server_dict(selectors.server_of(skill, agent.pk)))
