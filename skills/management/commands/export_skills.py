"""manage.py export_skills <directory> [--agent NAME] [--skill NAME ...] [--force]"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skills.management.commands._common import agent_by_name
from skills.models import Policy, Skill
from skills.selectors import policy_redacted_credentials, version_files


def _policy_json(policy: Policy) -> dict[str, Any]:
    """One policy in the seeds' policy.json vocabulary; credential values are "[set]"."""
    return {
        "trust": policy.status,
        "allowedDomains": list(policy.allowed_domains),
        "requiredCredentials": list(policy.required_credentials),
        "credentialValues": policy_redacted_credentials(policy=policy),
        "tools": list(policy.tools),
        "dependencies": list(policy.dependencies),
        "inputs": dict(policy.inputs),
        "approvedBy": policy.approved_by.get_username() if policy.approved_by else None,
        "approvedAt": policy.approved_at.isoformat() if policy.approved_at else None,
        "approvedContentHash": policy.approved_content_hash or None,
    }


class Command(BaseCommand):
    help = (
        "Write every skill's current version to <directory>/<name>/ (SKILL.md and its files) "
        'with a policy.json beside it. Credential values are written as "[set]", never in '
        "clear. With --agent the policy.json is that agent's policy in the seeds' flat layout; "
        'without it, policy.json lists every agent\'s policy under "agents".'
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory")
        parser.add_argument("--agent", help="export this agent's policy only")
        parser.add_argument("--skill", action="append", default=[], help="only these skills")
        parser.add_argument(
            "--force", action="store_true", help="replace skill directories that already exist"
        )

    def handle(self, *args: object, **options: Any) -> None:
        target = Path(options["directory"])
        agent = agent_by_name(options.get("agent"))
        skills = Skill.objects.select_related("current_version").order_by("name")
        if options["skill"]:
            skills = skills.filter(name__in=options["skill"])
            missing = sorted(set(options["skill"]) - set(skills.values_list("name", flat=True)))
            if missing:
                raise CommandError(f"No skill named {missing[0]!r}.")
        existing = [s.name for s in skills if (target / s.name).exists()]
        if existing and not options["force"]:
            raise CommandError(f"{target / existing[0]} already exists; use --force to replace it.")
        target.mkdir(parents=True, exist_ok=True)
        count = 0
        for skill in skills:
            version = skill.current_version
            if version is None:
                continue
            # Build the directory next to its destination and swap it in, so a failure never
            # leaves half a skill behind.
            staging = Path(tempfile.mkdtemp(prefix=f".{skill.name}.", dir=target))
            try:
                for f in version_files(version=version):
                    path = staging / f.path
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(bytes(f.data))
                policies = Policy.objects.filter(skill=skill).select_related("agent", "approved_by")
                document: dict[str, Any] = {
                    "schemaVersion": 1,
                    "provenance": {
                        "source": version.provenance.get("source"),
                        "fetchedAt": version.provenance.get("fetched_at"),
                        "contentHash": version.content_hash,
                    },
                    "version": version.number,
                }
                if agent is not None:
                    policy = policies.filter(agent=agent).first()
                    if policy is not None:
                        document.update(_policy_json(policy))
                else:
                    document["agents"] = {p.agent.name: _policy_json(p) for p in policies}
                policy_path = staging / "policy.json"
                policy_path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
                policy_path.chmod(0o600)
                final = target / skill.name
                if final.exists():
                    shutil.rmtree(final)
                staging.rename(final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            count += 1
            self.stdout.write(f"{skill.name}: v{version.number} -> {target / skill.name}")
        self.stdout.write(f"{count} skill(s) exported to {target}.")
