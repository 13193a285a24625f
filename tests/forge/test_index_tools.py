"""The skill index reads the tools a deployed MCP server registered from its `tools/list`: a
query matching only a tool's docstring finds the skill, lexically and by its embedding (computed
by a real Celery worker through the embeddings stub), and a new version's tools replace the old
ones when it is deployed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from forge.services import deploy_version
from skills.bundle import bundle_from_files
from skills.index.models import SkillEmbedding, SkillIndexEntry
from skills.index.search import skill_search
from skills.install import skill_install_bundle
from skills.services import Actor
from tests.cognition.cortex.workers import start_worker_fixture  # noqa: F401 - fixture

from .conftest import mcp_files

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

TIDES_SERVER = '''\
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("harbour")


@mcp.tool()
def echo(text: str) -> dict:
    """Give the rain forecast and the tide tables of a harbour."""
    return {"echo": text}


if __name__ == "__main__":
    mcp.run(transport="stdio")
'''

HAIKU_SERVER = TIDES_SERVER.replace(
    "Give the rain forecast and the tide tables of a harbour.", "Count the syllables of a haiku."
)


def _embedded(name: str) -> bool:
    entry = SkillIndexEntry.objects.get(skill__name=name)
    return SkillEmbedding.objects.filter(entry=entry, text_hash=entry.text_hash).exists()


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _hit(query: str, name: str):
    return next(
        (h for h in skill_search(query=query, agent=None, k=5).hits if h.name == name), None
    )


def test_a_query_matching_only_a_tools_docstring_finds_the_skill(
    agent, approved_mcp_skill, embeddings_stub, start_worker
):
    # given an MCP skill whose name, description and SKILL.md say nothing of tides or haiku,
    # another skill, and a worker that embeds what is indexed
    start_worker(
        EMBEDDINGS_MODEL="stub-embed",
        EMBEDDINGS_BASE_URL=embeddings_stub.base_url,
        EMBEDDINGS_API_KEY="stub-key",
    )
    skill_install_bundle(
        bundle=bundle_from_files(
            {"SKILL.md": b"---\nname: csv-summary\ndescription: Summarize a CSV file.\n---\n"},
            dir_name="csv-summary",
        ),
        actor=Actor.system("test"),
    )
    policy = approved_mcp_skill(agent, mcp_files(server=TIDES_SERVER))
    _wait(lambda: _embedded("echoer") and _embedded("csv-summary"), "the first embeddings")
    before = _hit("harbour tide tables", "echoer")
    assert before is None or before.lexical_rank is None
    assert "tide" not in SkillIndexEntry.objects.get(skill__name="echoer").document

    # when its version is deployed and its server registers the tool
    deploy_version(policy.skill.current_version, actor="owner")
    _wait(lambda: "tide" in SkillIndexEntry.objects.get(skill__name="echoer").document, "re-index")
    _wait(lambda: _embedded("echoer"), "the new embedding")

    # then the docstring is indexed and a query matching only it finds the skill, first
    entry = SkillIndexEntry.objects.get(skill__name="echoer")
    assert entry.fields["tools"] == [
        {"name": "echo", "docstring": "Give the rain forecast and the tide tables of a harbour."}
    ]
    lexical = skill_search(query="harbour tide tables", agent=None, k=5)
    assert (lexical.mode, lexical.hits[0].name, lexical.hits[0].lexical_rank) == (
        "hybrid",
        "echoer",
        1,
    )
    # and by its embedding: "sunny" is in no document, but shares the docstring's concept
    dense = skill_search(query="will it be sunny", agent=None, k=5)
    top = dense.hits[0]
    assert (top.name, top.lexical_rank, top.dense_rank) == ("echoer", None, 1)

    # when a new version registers other tools
    policy = approved_mcp_skill(agent, mcp_files(server=HAIKU_SERVER))
    assert policy.skill.current_version.number == 2
    deploy_version(policy.skill.current_version, actor="owner")
    _wait(lambda: "haiku" in SkillIndexEntry.objects.get(skill__name="echoer").document, "v2")
    _wait(lambda: _embedded("echoer"), "the new version's embedding")

    # then the index holds the new version's tools only
    assert _hit("haiku syllables", "echoer").lexical_rank == 1
    gone = _hit("harbour tide tables", "echoer")
    assert gone is None or gone.lexical_rank is None
