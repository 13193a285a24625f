from __future__ import annotations

from django.apps import AppConfig


class ForgeConfig(AppConfig):
    name = "forge"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "SkillForge"

    def ready(self) -> None:
        from forge.registry import executor_of_known, tools_sync
        from forge.runtime import pool
        from forge.services import current_server_ids
        from runs.pipeline.executors import tool_kind_resolver_register
        from runs.tools import tool_source_register

        # deployed MCP tools are registered in each process on demand (runs.tools)
        tool_source_register(tools_sync)
        # a call of a tool whose server is no longer deployed is told why, not "unknown tool"
        tool_kind_resolver_register(executor_of_known)
        # every new MCP skill version, imported or generated, is probed for its review
        from forge.version_probe import on_version_installed
        from skills.signals import version_installed

        version_installed.connect(on_version_installed, dispatch_uid="forge-version-probe")
        # a person's approval of a generated version, from any face, moves its flow on
        from forge.approving import flow_advance_on_approval
        from skills.signals import policy_approved

        policy_approved.connect(
            flow_advance_on_approval, weak=False, dispatch_uid="forge-flow-approval"
        )
        pool.is_current = current_server_ids
        # the skill index reads the tools each deployed version registered
        from forge import index_tools

        index_tools.connect()
