"""The MCP face of core.*: the same tools as /api/v1/tools/ over MCP's streamable HTTP."""
