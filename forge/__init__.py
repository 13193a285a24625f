"""SkillForge: the agent writes, tests and deploys its own tools as sandboxed MCP servers.

Depends on sandbox, skills and runs; cognition starts flows.
"""
