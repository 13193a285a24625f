"""skill.toml, the manifest of an MCP skill: content (hashed), validated with file + rule problems
like SKILL.md, unknown keys refused, read into a proposal for the review (never an approval)."""

from __future__ import annotations

import pytest

from skills.bundle import BundleError, bundle_from_files, parse_manifest, review_bundle

SKILL_MD = b"---\nname: uptime-checker\ndescription: Check HTTP endpoint uptime.\n---\nUse it.\n"
SERVER = (
    b"from mcp.server.fastmcp import FastMCP\nimport httpx\nmcp = FastMCP('uptime-checker')\n"
    b'@mcp.tool()\ndef check_uptime(url: str) -> dict:\n    """Check a URL."""\n'
    b"    return {'code': httpx.get('https://status.myapp.io/health').status_code}\n"
)
MANIFEST = b"""name = "uptime-checker"
version = "1"
created_at = 2026-02-15T12:00:00Z
created_by = "agent"
label = "public"
allowed_domains = ["status.myapp.io", "api.myapp.io"]

[server]
command = "python3"
args = ["scripts/server.py"]

[auth]
MY_API_KEY = "vault:myapp_api_key"

[sandbox]
memory_limit = "128m"
read_only_fs = true
allow_tmp = true

[search]
keywords = ["uptime", "status"]
example_queries = ["is my server up?"]

[tools.check_uptime]
semantics = "read"
"""


def _files(manifest: bytes = MANIFEST) -> dict[str, bytes]:
    return {"SKILL.md": SKILL_MD, "skill.toml": manifest, "scripts/server.py": SERVER}


def test_a_bundle_with_a_manifest_is_an_mcp_skill_whose_manifest_is_hashed_content():
    # given the three files of an MCP skill
    bundle = bundle_from_files(_files(), dir_name="uptime-checker")
    # then the manifest is content and parsed into a proposal
    assert [f.path for f in bundle.files] == ["SKILL.md", "scripts/server.py", "skill.toml"]
    assert bundle.is_mcp
    manifest = bundle.manifest
    assert (manifest.version, manifest.created_by, manifest.server_script) == (
        "1",
        "agent",
        "scripts/server.py",
    )
    assert manifest.created_at == "2026-02-15T12:00:00+00:00"
    assert manifest.proposal() == {
        "allowed_domains": ["status.myapp.io", "api.myapp.io"],
        "credentials": {"MY_API_KEY": "myapp_api_key"},
        "limits": {
            "memory_bytes": 128 * 1024 * 1024,
            "tmp_bytes": None,
            "allow_tmp": True,
            "max_processes": None,
            "call_timeout_s": None,
            "cpu_seconds": None,
        },
        "label": "public",
        "tool_semantics": {"check_uptime": "read"},
    }
    assert manifest.keywords == ("uptime", "status")
    assert manifest.semantics_of("check_uptime") == "read"
    assert manifest.semantics_of("undeclared") == "write"
    # and a change to the manifest alone changes the content hash
    other = bundle_from_files(_files(MANIFEST.replace(b'"1"', b'"2"')), dir_name=None)
    assert other.content_hash != bundle.content_hash


def test_a_skill_without_a_manifest_is_not_an_mcp_skill():
    bundle = bundle_from_files({"SKILL.md": SKILL_MD}, dir_name=None)
    assert (bundle.is_mcp, bundle.manifest) == (False, None)


@pytest.mark.parametrize(
    ("edit", "rule", "message"),
    [
        (
            lambda m: b"priority = 1\n" + m,
            "manifest-unknown-key",
            "unknown key 'priority'; allowed: allowed_domains, auth, created_at, created_by, "
            "description, label, name, sandbox, search, server, tools, version",
        ),
        (
            lambda m: m.replace(b"allow_tmp = true", b"allow_tmp = true\nswap = 1"),
            "manifest-unknown-key",
            "unknown key [sandbox] 'swap'; allowed: allow_tmp, call_timeout_s, cpu_seconds, "
            "max_processes, memory_limit, read_only_fs, tmp_limit",
        ),
        (
            lambda m: m.replace(b'created_by = "agent"', b'created_by = "robot"'),
            "manifest-created-by",
            '\'created_by\' is required: "agent" or "owner"',
        ),
        (
            lambda m: m.replace(b'version = "1"\n', b""),
            "manifest-version",
            "'version' is required: a string or integer of at most 32 chars",
        ),
        (
            lambda m: m.replace(b'"api.myapp.io"', b'"https://api.myapp.io/v1"'),
            "manifest-domain",
            "allowed_domains: 'https://api.myapp.io/v1' is not a lowercase host name (optionally "
            "'*.'-prefixed); no scheme, port, path or IP address",
        ),
        (
            lambda m: m.replace(b'"vault:myapp_api_key"', b'"sk-live-123456"'),
            "manifest-auth-not-vault",
            '[auth] MY_API_KEY must be a vault reference "vault:<name>"; credentials are never written '
            "into a skill",
        ),
        (
            lambda m: m.replace(b'"128m"', b'"64g"'),
            "manifest-limit-out-of-range",
            "[sandbox] 'memory_limit' is 6.87195e+10; it must be between 1.67772e+07 and "
            "2.14748e+09",
        ),
        (
            lambda m: m.replace(b"read_only_fs = true", b"read_only_fs = false"),
            "manifest-read-only-fs",
            "[sandbox] 'read_only_fs' must be true: a skill's files are always read-only in the "
            "sandbox (only /tmp is writable)",
        ),
        (
            lambda m: m.replace(b'command = "python3"', b'command = "node"'),
            "manifest-server-command",
            "[server] 'command' 'node' is not available in the skill runtime; use one of: "
            "python3, python",
        ),
        (
            lambda m: m.replace(b'["scripts/server.py"]', b'["scripts/main.py"]'),
            "manifest-server-missing",
            "[server] runs 'scripts/main.py', but the skill has no such file",
        ),
        (
            lambda m: m.replace(b'["scripts/server.py"]', b'["../server.py"]'),
            "manifest-server-args",
            "[server] the first argument '../server.py' must be a .py file of the skill (a "
            "relative path, no '..')",
        ),
        (
            lambda m: m.replace(b'semantics = "read"', b'semantics = "delete"'),
            "manifest-tool-semantics",
            '[tools.check_uptime] \'semantics\' must be "read" or "write"',
        ),
        (
            lambda m: m.replace(b'name = "uptime-checker"', b'name = "downtime"'),
            "manifest-name-mismatch",
            "'name' 'downtime' differs from SKILL.md's name 'uptime-checker'",
        ),
        (lambda m: m + b"\n[auth\n", "manifest-syntax", None),
    ],
)
def test_a_bad_manifest_refuses_the_bundle_naming_the_file_and_the_rule(edit, rule, message):
    # when a bundle with one defect in its manifest is validated
    with pytest.raises(BundleError) as caught:
        bundle_from_files(_files(edit(MANIFEST)), dir_name=None)
    # then exactly that problem is reported, on skill.toml
    [problem] = caught.value.problems
    assert (problem.path, problem.rule) == ("skill.toml", rule)
    if message is not None:
        assert problem.message == message


def test_a_literal_secret_in_auth_is_never_echoed_in_the_problem():
    _, problems = parse_manifest(MANIFEST.replace(b'"vault:myapp_api_key"', b'"sk-live-9f8e7d"'))
    assert problems and all("sk-live-9f8e7d" not in str(p) for p in problems)


def test_the_review_shows_the_proposal_and_where_the_manifest_and_the_code_disagree():
    # given a manifest allowing api.myapp.io that the code never uses, and code reading an
    # environment variable [auth] does not provide
    server = SERVER + b"import os\nTOKEN = os.environ['OTHER_TOKEN']\n"
    files = {**_files(), "scripts/server.py": server}
    # when the bundle is reviewed
    facts = review_bundle(bundle_from_files(files, dir_name=None))
    # then the review carries the proposal and the disagreements
    assert facts.mcp["proposal"]["allowed_domains"] == ["status.myapp.io", "api.myapp.io"]
    assert facts.mcp["mismatches"] == [
        {"kind": "manifest_domain_unreferenced", "category": "domain", "value": "api.myapp.io"},
        {"kind": "credential_not_in_manifest", "category": "credential", "value": "OTHER_TOKEN"},
    ]
    assert facts.to_dict()["mcp"]["server_script"] == "scripts/server.py"
