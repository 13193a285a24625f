"""What the SkillForge flow calls to test and deploy an MCP skill: one import for the flow.

* `probe_server` — spawn a version's server in a throwaway sandbox (production limits, egress of
  the manifest's proposed domains only), ``initialize`` + ``tools/list`` from the host with the
  ``mcp`` SDK client, stop it; the tools it offers, or why it failed.
* `run_server_tests` — ``pytest scripts/test_server.py`` in such a sandbox, under a hard limit.
* `deploy_version(version, actor=)` / `undeploy(skill, actor=)` (and `server_disable`,
  `server_enable`) — the database's record of what is deployed (forge.models: DeployedServer,
  McpTool); a deployed version's server starts on first use on whichever worker needs it.
  `deploy_version` needs an approved policy bound to the version's content hash; it raises
  DeployError (a DomainError: code ``deploy_failed``) with the reason.

Inputs are the bundle's files (a ``{path: bytes}`` mapping, a skills.bundle.Bundle or a skill
directory) and its
validated manifest (``Bundle.manifest``); credentials are values resolved by the caller, used
for the sandbox's environment only and never stored, logged or returned.
"""

from __future__ import annotations

from forge.deploy import DeployError, deploy_version, server_disable, server_enable, undeploy
from forge.probe import (
    ProbeResult,
    TestRun,
    ToolSpec,
    probe_server,
    run_server_tests,
    schema_problem,
)

__all__ = [
    "DeployError",
    "ProbeResult",
    "TestRun",
    "ToolSpec",
    "deploy_version",
    "probe_server",
    "run_server_tests",
    "schema_problem",
    "server_disable",
    "server_enable",
    "undeploy",
]
