"""Long-lived stdio MCP servers in sandboxes: the process (`SandboxedProcess`, its stdio through
FIFOs in a session of its own) and the host's client (`McpClient`, the ``mcp`` SDK's
ClientSession over those FIFOs). Pure library: no Django."""

from __future__ import annotations

from sandbox.mcp.client import (
    CallOutcome,
    McpClient,
    McpError,
    McpProtocolError,
    McpTimeout,
    ToolInfo,
)
from sandbox.mcp.process import STDIO_DIR, ProcessSpec, SandboxedProcess

__all__ = [
    "STDIO_DIR",
    "CallOutcome",
    "McpClient",
    "McpError",
    "McpProtocolError",
    "McpTimeout",
    "ProcessSpec",
    "SandboxedProcess",
    "ToolInfo",
]
