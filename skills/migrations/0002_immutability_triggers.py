"""Database triggers that make versions, files and the audit trail tamper-resistant.

The application never updates a SkillVersion's content, a SkillFile or a PolicyAuditEvent; these
triggers make the database refuse it too, so a bug or a stray shell session cannot rewrite what
was approved. The only updates let through are the ones Django's on_delete=SET_NULL issues when a
referenced row (parent version, user, policy, skill, agent) is deleted.
"""

from __future__ import annotations

from django.db import migrations

POSTGRES_FORWARD = """
CREATE OR REPLACE FUNCTION skills_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING
        MESSAGE = 'skills: rows of ' || TG_TABLE_NAME || ' are immutable (id ' || OLD.id || ')',
        ERRCODE = 'integrity_constraint_violation';
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER skills_skillfile_immutable
    BEFORE UPDATE ON skills_skillfile
    FOR EACH ROW EXECUTE FUNCTION skills_refuse_change();

CREATE TRIGGER skills_skillversion_immutable
    BEFORE UPDATE ON skills_skillversion
    FOR EACH ROW
    WHEN (
        ROW(NEW.skill_id, NEW.number, NEW.content_hash, NEW.description, NEW.frontmatter::text,
            NEW.provenance::text, NEW.extracted_from::text, NEW.created_by_label, NEW.created_at)
        IS DISTINCT FROM
        ROW(OLD.skill_id, OLD.number, OLD.content_hash, OLD.description, OLD.frontmatter::text,
            OLD.provenance::text, OLD.extracted_from::text, OLD.created_by_label, OLD.created_at)
        OR (NEW.parent_id IS NOT NULL AND NEW.parent_id IS DISTINCT FROM OLD.parent_id)
        OR (NEW.created_by_id IS NOT NULL AND NEW.created_by_id IS DISTINCT FROM OLD.created_by_id)
    )
    EXECUTE FUNCTION skills_refuse_change();

CREATE TRIGGER skills_policyauditevent_no_delete
    BEFORE DELETE ON skills_policyauditevent
    FOR EACH ROW EXECUTE FUNCTION skills_refuse_change();

CREATE TRIGGER skills_policyauditevent_append_only
    BEFORE UPDATE ON skills_policyauditevent
    FOR EACH ROW
    WHEN (
        ROW(NEW.skill_name, NEW.agent_ref_id, NEW.agent_name, NEW.actor_label, NEW.created_at,
            NEW.action, NEW.from_status, NEW.to_status, NEW.reason, NEW.content_hash,
            NEW.version_number, NEW.changes::text)
        IS DISTINCT FROM
        ROW(OLD.skill_name, OLD.agent_ref_id, OLD.agent_name, OLD.actor_label, OLD.created_at,
            OLD.action, OLD.from_status, OLD.to_status, OLD.reason, OLD.content_hash,
            OLD.version_number, OLD.changes::text)
        OR (NEW.policy_id IS NOT NULL AND NEW.policy_id IS DISTINCT FROM OLD.policy_id)
        OR (NEW.skill_id IS NOT NULL AND NEW.skill_id IS DISTINCT FROM OLD.skill_id)
        OR (NEW.agent_id IS NOT NULL AND NEW.agent_id IS DISTINCT FROM OLD.agent_id)
        OR (NEW.actor_id IS NOT NULL AND NEW.actor_id IS DISTINCT FROM OLD.actor_id)
    )
    EXECUTE FUNCTION skills_refuse_change();
"""

POSTGRES_REVERSE = """
DROP TRIGGER IF EXISTS skills_policyauditevent_append_only ON skills_policyauditevent;
DROP TRIGGER IF EXISTS skills_policyauditevent_no_delete ON skills_policyauditevent;
DROP TRIGGER IF EXISTS skills_skillversion_immutable ON skills_skillversion;
DROP TRIGGER IF EXISTS skills_skillfile_immutable ON skills_skillfile;
DROP FUNCTION IF EXISTS skills_refuse_change();
"""

SQLITE_FORWARD = [
    """CREATE TRIGGER skills_skillfile_immutable BEFORE UPDATE ON skills_skillfile
    BEGIN SELECT RAISE(ABORT, 'skills: rows of skills_skillfile are immutable'); END""",
    """CREATE TRIGGER skills_skillversion_immutable BEFORE UPDATE ON skills_skillversion
    WHEN NEW.skill_id IS NOT OLD.skill_id OR NEW.number IS NOT OLD.number
      OR NEW.content_hash IS NOT OLD.content_hash OR NEW.description IS NOT OLD.description
      OR NEW.frontmatter IS NOT OLD.frontmatter OR NEW.provenance IS NOT OLD.provenance
      OR NEW.extracted_from IS NOT OLD.extracted_from
      OR NEW.created_by_label IS NOT OLD.created_by_label OR NEW.created_at IS NOT OLD.created_at
      OR (NEW.parent_id IS NOT NULL AND NEW.parent_id IS NOT OLD.parent_id)
      OR (NEW.created_by_id IS NOT NULL AND NEW.created_by_id IS NOT OLD.created_by_id)
    BEGIN SELECT RAISE(ABORT, 'skills: rows of skills_skillversion are immutable'); END""",
    """CREATE TRIGGER skills_policyauditevent_no_delete BEFORE DELETE ON skills_policyauditevent
    BEGIN SELECT RAISE(ABORT, 'skills: rows of skills_policyauditevent are immutable'); END""",
    """CREATE TRIGGER skills_policyauditevent_append_only BEFORE UPDATE ON skills_policyauditevent
    WHEN NEW.skill_name IS NOT OLD.skill_name OR NEW.agent_ref_id IS NOT OLD.agent_ref_id
      OR NEW.agent_name IS NOT OLD.agent_name OR NEW.actor_label IS NOT OLD.actor_label
      OR NEW.created_at IS NOT OLD.created_at OR NEW.action IS NOT OLD.action
      OR NEW.from_status IS NOT OLD.from_status OR NEW.to_status IS NOT OLD.to_status
      OR NEW.reason IS NOT OLD.reason OR NEW.content_hash IS NOT OLD.content_hash
      OR NEW.version_number IS NOT OLD.version_number OR NEW.changes IS NOT OLD.changes
      OR (NEW.policy_id IS NOT NULL AND NEW.policy_id IS NOT OLD.policy_id)
      OR (NEW.skill_id IS NOT NULL AND NEW.skill_id IS NOT OLD.skill_id)
      OR (NEW.agent_id IS NOT NULL AND NEW.agent_id IS NOT OLD.agent_id)
      OR (NEW.actor_id IS NOT NULL AND NEW.actor_id IS NOT OLD.actor_id)
    BEGIN SELECT RAISE(ABORT, 'skills: rows of skills_policyauditevent are immutable'); END""",
]

SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS skills_policyauditevent_append_only",
    "DROP TRIGGER IF EXISTS skills_policyauditevent_no_delete",
    "DROP TRIGGER IF EXISTS skills_skillversion_immutable",
    "DROP TRIGGER IF EXISTS skills_skillfile_immutable",
]


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_FORWARD)
    elif vendor == "sqlite":
        for statement in SQLITE_FORWARD:
            schema_editor.execute(statement)


def reverse(apps, schema_editor):  # type: ignore[no-untyped-def]
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_REVERSE)
    elif vendor == "sqlite":
        for statement in SQLITE_REVERSE:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("skills", "0001_initial")]

    operations = [migrations.RunPython(forward, reverse)]
