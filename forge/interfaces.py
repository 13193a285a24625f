"""What the SkillForge flow calls to test and deploy an MCP skill: one import for the flow.

* `probe_server` — spawn a version's server in a throwaway sandbox (production limits, egress of
  the manifest's proposed domains only), ``initialize`` + ``tools/list`` from the host with the
  ``mcp`` SDK client, stop it; the tools it offers, or why it failed.
* `run_server_tests` — ``pytest scripts/test_server.py`` in such a sandbox, under a hard limit.
* `deploy_version` / `undeploy` — the database's record of what is deployed (forge.models); a
  deployed version's server starts on first use on whichever worker needs it.

Inputs are the bundle's files (a ``{path: bytes}`` mapping or a skills.bundle.Bundle) and its
validated manifest (``Bundle.manifest``); credentials are values resolved by the caller, used
for the sandbox's environment only and never stored, logged or returned.
"""

from __future__ import annotations

from forge.deploy import DeployError, deploy_version, undeploy
from forge.probe import ProbeResult, TestRun, ToolSpec, probe_server, run_server_tests

__all__ = [
    "DeployError",
    "ProbeResult",
    "TestRun",
    "ToolSpec",
    "deploy_version",
    "probe_server",
    "run_server_tests",
    "undeploy",
]
