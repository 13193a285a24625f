"""Tool registry: names, aliases, LLM schemas and idempotency flags."""

from __future__ import annotations

import pytest

from sandbox.tools import TOOL_NAMES, TOOLS, UnknownTool, expand_tools, is_idempotent, tool_schemas


def test_tool_names_are_the_contracted_set() -> None:
    assert TOOL_NAMES == ("code", "bash", "read", "write", "edit", "list", "glob", "grep", "fetch")


def test_aliases_expand_in_registry_order_without_duplicates() -> None:
    # given aliases mixed with tool names and a duplicate
    # when expanded
    expanded = expand_tools(["fetch", "filesystem", "read", "shell"])
    # then the result is the tool names in registry order, once each
    assert expanded == ("bash", "read", "write", "edit", "list", "glob", "grep", "fetch")


def test_unknown_tool_names_are_refused_by_name() -> None:
    # given a grant with two unknown names, when expanded, then both are named in the error
    with pytest.raises(UnknownTool) as caught:
        expand_tools(["code", "browser", "python"])
    assert str(caught.value).startswith("unknown tool(s): 'browser', 'python'; known tools: code,")
    assert "filesystem = read+write+edit+list+glob+grep" in str(caught.value)


def test_schemas_cover_only_the_granted_tools() -> None:
    # given a grant of code and the shell alias
    # when schemas are built
    schemas = tool_schemas(["shell", "code"])
    # then exactly those two functions are described, in OpenAI function-calling form
    assert [s["function"]["name"] for s in schemas] == ["code", "bash"]
    bash = schemas[1]
    assert bash["type"] == "function"
    assert bash["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "description": "The shell command line.",
                "maxLength": 65536,
            }
        },
        "required": ["command"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_schema_is_well_formed(name: str) -> None:
    # given one tool, when its schema is built
    (schema,) = tool_schemas([name])
    params = schema["function"]["parameters"]
    # then it describes itself and its required arguments exist among its properties
    assert len(schema["function"]["description"]) > 40
    assert set(params["required"]) <= set(params["properties"])
    assert all("description" in p for p in params["properties"].values())


@pytest.mark.parametrize(
    ("name", "args", "network", "expected"),
    [
        ("read", {"path": "a"}, True, True),
        ("list", {}, True, True),
        ("glob", {"pattern": "*"}, True, True),
        ("grep", {"pattern": "x"}, True, True),
        ("write", {"path": "a", "content": "x"}, True, True),
        ("edit", {"path": "a", "old_string": "x", "new_string": "y"}, True, False),
        ("bash", {"command": "echo"}, False, False),
        ("code", {"code": "print(1)"}, False, True),
        ("code", {"code": "print(1)"}, True, False),
        ("fetch", {"url": "https://x.test"}, True, True),
        ("fetch", {"url": "https://x.test", "method": "head"}, True, True),
        ("fetch", {"url": "https://x.test", "method": "POST"}, True, False),
    ],
)
def test_idempotency_per_call(
    name: str, args: dict[str, str], network: bool, expected: bool
) -> None:
    assert is_idempotent(name, args, network_enabled=network) is expected


def test_static_idempotent_flags_are_conservative() -> None:
    assert {n: s.idempotent for n, s in TOOLS.items()} == {
        "code": False,
        "bash": False,
        "read": True,
        "write": True,
        "edit": False,
        "list": True,
        "glob": True,
        "grep": True,
        "fetch": False,
    }


def test_a_skill_allowlist_is_named_in_the_bash_description() -> None:
    # given a skill with its own shell allowlist
    (default,) = tool_schemas(["bash"])
    (custom,) = tool_schemas(["bash"], bash_allowlist=["ls", "sort"])
    # then the model is told exactly which commands it has
    assert (
        "(by default: curl, jq, grep, sort, uniq, wc, head, tail, cat, echo, date)"
        in (default["function"]["description"])
    )
    assert "(in this run: ls, sort)" in custom["function"]["description"]
    assert "by default" not in custom["function"]["description"]
