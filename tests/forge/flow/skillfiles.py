"""Generated skills for the SkillForge tests: the four files, and a model answer holding them."""

from __future__ import annotations

SERVER_TEMPLATE = '''"""{name}: test skill."""

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("{name}")
{body}

if __name__ == "__main__":
    mcp.run(transport="stdio")
'''

ADD_TOOL = '''

@mcp.tool()
def add(a: int, b: int) -> dict:
    """Add two integers. Returns {"sum": a + b}."""
    return {"sum": a + b}
'''

FETCH_TOOL = '''
import httpx


@mcp.tool()
def status_of(url: str) -> dict:
    """GET `url` once (https://{domain}/...) and return its status code."""
    return {{"status_code": httpx.get(url, timeout={timeout}).status_code}}
'''

PASSING_TEST = """from server import add


def test_add():
    assert add(2, 3) == {"sum": 5}
"""

FAILING_TEST = """from server import add


def test_add():
    assert add(2, 3) == {"sum": 6}
"""

FETCH_TEST = """import server


def test_the_tool_exists():
    assert callable(server.status_of)
"""


def skill_files(
    name: str = "adder",
    *,
    body: str = ADD_TOOL,
    test: str = PASSING_TEST,
    domains: tuple[str, ...] = (),
    auth: dict[str, str] | None = None,
    semantics: dict[str, str] | None = None,
    description: str = "Add two integers. Use when a sum is needed.",
) -> dict[str, str]:
    """The four files of a generated skill."""
    semantics = {"add": "read"} if semantics is None else semantics
    auth_lines = "".join(f'{env} = "vault:{vault}"\n' for env, vault in (auth or {}).items())
    tools = "".join(f'\n[tools.{tool}]\nsemantics = "{s}"\n' for tool, s in semantics.items())
    domain_list = ", ".join(f'"{d}"' for d in domains)
    return {
        "SKILL.md": f"---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n\nTools.\n",
        "scripts/server.py": SERVER_TEMPLATE.format(name=name, body=body),
        "scripts/test_server.py": test,
        "skill.toml": (
            f'name = "{name}"\ndescription = "test"\nversion = "1"\ncreated_by = "agent"\n'
            f'allowed_domains = [{domain_list}]\n\n[server]\ncommand = "python3"\n'
            f'args = ["scripts/server.py"]\n\n[auth]\n{auth_lines}\n[search]\n'
            f'keywords = ["{name}"]\nexample_queries = ["use {name}"]\n{tools}'
        ),
    }


def fetch_skill(name: str = "uptime-checker", domain: str = "status.myapp.io", **kw) -> dict:
    return skill_files(
        name,
        body=FETCH_TOOL.format(domain=domain, timeout=kw.pop("timeout", 5)),
        test=FETCH_TEST,
        domains=(domain,),
        semantics={"status_of": "read"},
        description="Check whether a web endpoint is up. Use for uptime questions.",
        **kw,
    )


def answer(files: dict[str, str], *, prose: str = "Here is the skill.") -> str:
    """A model answer: some prose, then one fenced block per file named by its path."""
    blocks = []
    for path, text in files.items():
        fence = "````" if "```" in text else "```"
        blocks.append(f"{fence}{path}\n{text.rstrip()}\n{fence}")
    return prose + "\n\n" + "\n\n".join(blocks) + "\n"
