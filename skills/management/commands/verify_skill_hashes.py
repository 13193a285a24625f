"""manage.py verify_skill_hashes — recompute every stored version's content hash."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from skills.bundle import content_hash, sha256_hex
from skills.models import SkillFile, SkillVersion


class Command(BaseCommand):
    help = (
        "Recompute the content hash of every stored skill version from its file bytes and "
        "compare it, and each file's size and sha256, with what was recorded. Exits non-zero "
        "and lists every mismatch."
    )

    def handle(self, *args: object, **options: object) -> None:
        mismatches: list[str] = []
        checked = 0
        for version in SkillVersion.objects.select_related("skill").order_by(
            "skill__name", "number"
        ):
            checked += 1
            files = list(SkillFile.objects.filter(version=version).order_by("path"))
            for f in files:
                data = bytes(f.data)
                if len(data) != f.size or sha256_hex(data) != f.sha256:
                    mismatches.append(
                        f"{version.skill.name} v{version.number} {f.path}: recorded "
                        f"{f.size} bytes sha256 {f.sha256}, stored {len(data)} bytes sha256 "
                        f"{sha256_hex(data)}"
                    )
            actual = content_hash((f.path, bytes(f.data)) for f in files)
            if actual != version.content_hash:
                mismatches.append(
                    f"{version.skill.name} v{version.number}: recorded {version.content_hash}, "
                    f"files hash to {actual}"
                )
        if mismatches:
            for line in mismatches:
                self.stderr.write(line)
            raise CommandError(
                f"{len(mismatches)} mismatch(es) in {checked} skill version(s); see above."
            )
        self.stdout.write(f"{checked} skill version(s) verified, all hashes match.")
