"""Files a host tool would execute or source — git's .git/ (hooks, config), .gitconfig and
.gitmodules, shell rc and profile files, direnv's .envrc — are data a run may leave in its
workspace, never part of a skill: classification, extraction and the workspace baseline all skip
them, at any depth and in any letter case."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills.bundle.paths import classify
from skills.extraction import skill_prepare_workspace, skills_extract_from_workspace
from skills.install import skill_install_bundle
from skills.models import Policy, PolicyStatus, Skill, SkillFile, SkillVersion
from skills.reviewing import policy_approve, policy_review
from skills.services import Actor
from tests.skills.conftest import make_bundle, skill_md

pytestmark = pytest.mark.django_db

CANARY = "host-executed-canary"
HOSTILE = {
    ".git/hooks/post-checkout": f"#!/bin/sh\necho {CANARY}\n",
    ".git/config": f"[core]\n\tfsmonitor = echo {CANARY}\n",
    "scripts/.git/hooks/pre-commit": f"#!/bin/sh\necho {CANARY}\n",
    "scripts/.GIT/config": f"[core]\n\tpager = echo {CANARY}\n",
    "scripts/.gitconfig": f"[alias]\n\tx = !echo {CANARY}\n",
    "assets/.gitmodules": f'[submodule "x"]\n\turl = ext::sh -c {CANARY}\n',
    ".bashrc": f"echo {CANARY}\n",
    "scripts/.bashrc": f"echo {CANARY}\n",
    "scripts/.bash_profile": f"echo {CANARY}\n",
    "references/.profile": f"echo {CANARY}\n",
    "scripts/.zshrc": f"echo {CANARY}\n",
    "scripts/.zshenv": f"echo {CANARY}\n",
    "assets/.envrc": f"echo {CANARY}\n",
    "scripts/.Bashrc": f"echo {CANARY}\n",
}


@pytest.mark.parametrize("path", sorted(HOSTILE))
def test_host_executed_files_are_never_content(path: str) -> None:
    assert classify(path) == "denied"


@pytest.mark.parametrize(
    "path", ["scripts/gitconfig.py", "references/bashrc.md", "assets/.gitignore"]
)
def test_similar_ordinary_names_stay_content(path: str) -> None:
    assert classify(path) == "content"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _stored_bytes() -> list[bytes]:
    return [bytes(content) for content in SkillFile.objects.values_list("data", flat=True)]


def test_a_new_skill_is_extracted_without_them(agent, tmp_path: Path) -> None:
    # given a run wrote a skill at the workspace root next to hooks, configs and rc files
    _write(tmp_path, {"SKILL.md": skill_md("tidy"), "scripts/run.py": "print('ok')\n", **HOSTILE})
    # when the skill is extracted
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=5, agent=agent, pending_credentials={}
    )
    # then it holds its own files only, and no stored byte came from the others
    assert result["created"] == ["tidy"]
    version = Skill.objects.get(name="tidy").current_version
    assert sorted(version.files.values_list("path", flat=True)) == ["SKILL.md", "scripts/run.py"]
    assert not [data for data in _stored_bytes() if CANARY.encode() in data]


def test_adding_them_to_a_prepared_workspace_changes_nothing(agent, approver_actor, tmp_path):
    # given an approved skill prepared in a workspace
    installed = skill_install_bundle(
        bundle=make_bundle("mailer", {"scripts/send.sh": "echo send\n"}),
        actor=Actor.system("import"),
        agent=agent,
    )
    policy_review(policy=installed.policy, actor=approver_actor)
    policy_approve(policy=installed.policy, actor=approver_actor)
    skill_prepare_workspace(version=installed.version, workspace=tmp_path)
    # when the run leaves hooks, configs and rc files in it
    _write(tmp_path, HOSTILE)
    result = skills_extract_from_workspace(
        workspace=tmp_path, run_id=6, agent=agent, pending_credentials={}
    )
    # then the skill is unchanged: no new version, the approval stands
    assert result == {"created": [], "updated": [], "unchanged": ["mailer"], "failed": []}
    assert SkillVersion.objects.count() == 1
    assert Policy.objects.get(pk=installed.policy.pk).status == PolicyStatus.APPROVED
    assert not [data for data in _stored_bytes() if CANARY.encode() in data]


def test_an_imported_bundle_never_carries_them(agent) -> None:
    # given a bundle holding them next to its own files
    bundle = make_bundle("importer", {"scripts/run.py": "print(1)\n", **HOSTILE})
    # when it is installed
    installed = skill_install_bundle(bundle=bundle, actor=Actor.system("import"), agent=agent)
    # then only the skill's own files are stored
    paths = sorted(installed.version.files.values_list("path", flat=True))
    assert paths == ["SKILL.md", "scripts/run.py"]
