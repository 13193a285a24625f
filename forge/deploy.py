"""Deploying a skill version as an MCP server (forge.services holds the implementation): the
database says what is deployed; any worker starts the server on first use (forge.runtime)."""

from __future__ import annotations

from forge.errors import DeployError
from forge.services import deploy_version, server_disable, server_enable, undeploy

__all__ = ["DeployError", "deploy_version", "server_disable", "server_enable", "undeploy"]
