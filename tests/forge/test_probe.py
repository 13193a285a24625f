"""probe_server and run_server_tests against real servers, good and bad, in the real sandbox:
each failure is a clear error, the sandbox is gone afterwards, nothing is left running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forge.probe import probe_server, run_server_tests
from skills.bundle import bundle_from_files
from tests.forge.conftest import ECHO_SERVER, mcp_files


def bundle(server: str = ECHO_SERVER, *, tests: str | None = None, manifest: str | None = None):
    files = mcp_files(server=server)
    if tests is not None:
        files["scripts/test_server.py"] = tests
    if manifest is not None:
        files["skill.toml"] = manifest
    return bundle_from_files({k: v.encode() for k, v in files.items()}, dir_name=None)


def sandbox_processes() -> list[str]:
    """Command lines of the processes running a skill server on this host."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "/skill/scripts/server.py" in cmdline:
                found.append(cmdline)
    return found


def test_the_probe_lists_the_tools_of_a_good_server():
    b = bundle()
    result = probe_server(b, b.manifest)
    assert result.error is None
    assert [(t.name, t.description) for t in result.tools] == [
        ("echo", "Repeat a text."),
        ("shout", "Say a text loudly."),
    ]
    assert result.tools[0].input_schema["required"] == ["text"]
    assert sandbox_processes() == []


def test_a_server_that_never_answers_initialize_is_killed_at_the_limit():
    # given a server that reads nothing and sleeps
    b = bundle("import time\ntime.sleep(600)\n")
    # when it is probed with a 4 s limit
    result = probe_server(b, b.manifest, timeout_s=4)
    # then the probe fails naming the handshake, within the limit, and nothing is left running
    assert result.error == "the server did not answer initialize within the probe's limit of 4 s"
    assert result.tools == ()
    assert result.duration_ms < 15_000
    assert sandbox_processes() == []


def test_a_server_printing_garbage_to_stdout_fails_with_the_line_quoted():
    b = bundle('print("hello from the server")\n' + ECHO_SERVER)
    result = probe_server(b, b.manifest, timeout_s=20)
    assert result.error == (
        "the server wrote a line to stdout that is not a JSON-RPC message (stdout is the "
        "protocol channel; log to stderr): 'hello from the server'"
    )
    assert result.tools == ()


def test_a_server_that_crashes_at_start_reports_its_stderr_tail():
    b = bundle("import sys\nsys.stderr.write('boom: missing config\\n')\nsys.exit(3)\n")
    result = probe_server(b, b.manifest, timeout_s=20)
    assert result.error == "the server ended (exited with status 3)"
    assert result.stderr_tail == "boom: missing config\n"


BAD_SCHEMA_SERVER = """\
import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

server = Server("bad-schema")


@server.list_tools()
async def list_tools():
    return [types.Tool(name="broken", description="A tool with a broken schema.",
                       inputSchema={"type": "object", "properties": {"x": {"type": "nonsense"}}})]


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


def test_a_tool_whose_input_schema_is_not_json_schema_fails_the_probe():
    b = bundle(BAD_SCHEMA_SERVER)
    result = probe_server(b, b.manifest, timeout_s=20)
    assert result.error is not None
    assert result.error.startswith("tool 'broken': its input schema is not valid JSON Schema: ")
    assert result.tools == ()


def test_credentials_reach_the_server_as_environment_and_never_the_report():
    # given a server that dies printing its token to stderr
    server = "import os, sys\nsys.stderr.write('token=' + os.environ['MY_TOKEN'])\nsys.exit(1)\n"
    manifest = 'version = "1"\ncreated_by = "owner"\n[auth]\nMY_TOKEN = "vault:my_token"\n'
    b = bundle(server, manifest=manifest)
    result = probe_server(b, b.manifest, credentials={"MY_TOKEN": "s3cr3t-value"}, timeout_s=20)
    # then the report names the credential, never its value
    assert result.stderr_tail == "token=<credential:my_token>"
    assert "s3cr3t-value" not in repr(result)


def test_the_server_tests_run_under_a_hard_limit():
    passing = run_server_tests(bundle(), bundle().manifest)
    assert (passing.passed, passing.exit_code) == (True, 0)
    assert "1 passed" in passing.output
    hanging = bundle(tests="import time\n\ndef test_hang():\n    time.sleep(600)\n")
    result = run_server_tests(hanging, hanging.manifest, timeout_s=8)
    assert (result.passed, result.timed_out) == (False, True)
    assert result.output.endswith("[killed at the 8 s limit]")


def test_the_probe_takes_a_skill_directory(tmp_path: Path):
    # given the skill's files in a directory whose name is not the skill's
    root = tmp_path / "generated-attempt-2"
    for rel, text in mcp_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    b = bundle()
    # when the directory is probed
    result = probe_server(root, b.manifest)
    # then its tools are listed
    assert result.error is None
    assert [t.name for t in result.tools] == ["echo", "shout"]


@pytest.mark.docker
def test_the_docker_backend_runs_the_same_server_with_the_image_s_runtime(settings):
    # given the docker backend, whose image carries the same pinned runtime at the same path
    settings.SANDBOX_BACKEND = "docker"
    b = bundle(tests=None)
    # when the server is probed and its tests run there
    result = probe_server(b, b.manifest, timeout_s=60)
    tests = run_server_tests(b, b.manifest, timeout_s=60)
    # then it behaves as under bwrap
    assert result.error is None
    assert [t.name for t in result.tools] == ["echo", "shout"]
    assert (tests.passed, tests.exit_code) == (True, 0)
