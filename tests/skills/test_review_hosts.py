"""Hosts written without a scheme are referenced domains, and a new one shows in the version diff."""

from __future__ import annotations

import pytest

from skills.bundle import diff_bundles, review_bundle
from skills.bundle.hosts import bare_hosts

HEAD = "---\nname: rates\ndescription: Exchange rates.\n---\n"


def skill(body: str, **files: str) -> dict[str, bytes]:
    out = {"SKILL.md": (HEAD + body).encode()}
    out.update({path.replace("__", "/").replace("_", "."): t.encode() for path, t in files.items()})
    return out


def test_a_bare_host_added_in_a_new_version_is_in_the_capability_diff():
    # given v1 that talks to one API by URL, and v2 that adds a bare host in a shell block
    # and another in prose
    v1 = skill("Rates from https://api.frankfurter.app/latest.\n")
    v2 = skill(
        "Rates from https://api.frankfurter.app/latest.\n"
        "Fallback: the free service at api.exchangerate.host.\n"
        "```bash\ncurl -s open.er-api.com/v6/latest/EUR | jq .rates.USD\n```\n"
    )
    # when the versions are compared
    diff = diff_bundles(v1, v2)
    # then both new hosts are named as new capabilities (besides the new shell block)
    assert diff.domains_added == ["api.exchangerate.host", "open.er-api.com"]
    assert diff.domains_removed == []
    assert diff.capability == [
        "now also references api.exchangerate.host",
        "now also references open.er-api.com",
        "now has shell code blocks",
    ]
    # and the review of v2 lists them as referenced, undeclared domains
    facts = review_bundle(v2, declared_domains=["api.frankfurter.app"])
    assert facts.referenced_domains == [
        "api.exchangerate.host",
        "api.frankfurter.app",
        "open.er-api.com",
    ]
    assert [m["value"] for m in facts.mismatches if m["kind"] == "domain_not_declared"] == [
        "api.exchangerate.host",
        "open.er-api.com",
    ]


def test_a_bare_host_in_a_code_string_counts_but_attribute_chains_do_not():
    files = skill(
        "See scripts.\n",
        scripts__fetch_py=(
            "import os\n"
            "HOST = 'api.exchangerate.host'\n"
            "path = os.path.join(os.getcwd(), 'setup.py')\n"
            "self.logger.info('x'); user.email = 'a'\n"
            "subprocess.run(cmd)\n"
        ),
    )
    assert review_bundle(files).referenced_domains == ["api.exchangerate.host"]


@pytest.mark.parametrize(
    "text",
    [
        "Edit file.py and SKILL.md, then README.md and run.sh; unpack data.zip.",
        "Use os.path and sys.argv; logger.info and user.name are attributes.",
        "Node.js, ASP.NET and Vue.js are names, e.g. i.e. v1.2.3 python3.12.",
        "Write to someone@corp.io for access.",
        "Call subprocess.run(args) and response.json().",
        "```python\nx = user.email\nos.path.join(a, b)\n```",
        "Placeholders like api.example.com and svc.test are not hosts.",
    ],
)
def test_words_that_only_look_like_hosts_are_not_referenced(text):
    facts = review_bundle(skill(text + "\n"))
    assert facts.referenced_domains == []
    assert facts.mismatches == []


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("Clone git@github.com:org/repo.git", "github.com"),
        ("API docs at docs.rs/serde", "docs.rs"),
        ("nc bore.pub 7000", "bore.pub"),
        ("`api.exchangerate.host` is free.", "api.exchangerate.host"),
        ("Slack webhooks live on hooks.slack.com.", "hooks.slack.com"),
        ("Key from platform.openai.com, then retry", "platform.openai.com"),
    ],
)
def test_hosts_in_prose_and_shell_are_found(text, host):
    assert [h for _, h in bare_hosts("SKILL.md", text)] == [host]


def test_the_public_suffix_list_is_the_one_shipped_with_the_package(monkeypatch):
    # no network at run time: any socket use while parsing hosts fails the test
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("the host parser tried to use the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert bare_hosts("SKILL.md", "use api.exchangerate.host\n") == [(4, "api.exchangerate.host")]


def test_code_regions_are_looked_up_correctly_among_many_blocks():
    blocks = "".join(
        f"```python\nx{i} = user.name\n```\nsee api{i}.weather.io\n" for i in range(300)
    )
    found = [h for _, h in bare_hosts("SKILL.md", blocks)]
    assert found == [f"api{i}.weather.io" for i in range(300)]


def test_a_hostile_megabyte_of_dotted_words_is_parsed_quickly():
    import time

    started = time.monotonic()
    bare_hosts("SKILL.md", "a.b.c.d.e.f.g.h.i.j.k.l.m.n " * 40_000 + "```python\n" * 20_000)
    assert time.monotonic() - started < 10


@pytest.mark.django_db
def test_the_stored_review_of_a_new_version_shows_the_bare_host_it_added(
    agent, system_actor, approver_actor
):
    from skills.install import skill_install_bundle
    from skills.reviewing import policy_approve, policy_review
    from tests.skills.conftest import make_bundle

    # given v1 approved for the agent, with no host at all
    v1 = skill_install_bundle(
        bundle=make_bundle("rates", body="Convert amounts between currencies.\n"),
        actor=system_actor,
        agent=agent,
    )
    policy_review(policy=v1.policy, actor=approver_actor)
    policy_approve(policy=v1.policy, actor=approver_actor)
    # when v2 names a host without a scheme and is reviewed
    v2 = skill_install_bundle(
        bundle=make_bundle(
            "rates", body="Convert amounts with the rates of api.exchangerate.host.\n"
        ),
        actor=system_actor,
        agent=agent,
    )
    policy = policy_review(policy=v2.policy, actor=approver_actor)
    # then the stored diff against v1 lists it as a new capability, and the facts as undeclared
    diff = policy.review_facts["diff"]
    assert diff["domains_added"] == ["api.exchangerate.host"]
    assert diff["capability"] == ["now also references api.exchangerate.host"]
    assert {
        "kind": "domain_not_declared",
        "category": "domain",
        "value": "api.exchangerate.host",
    } in (policy.review_facts["mismatches"])
