"""Request and response shapes of the API. Credential values are write-only everywhere: a
response shows "[set]" for a stored value and never the value itself."""

from __future__ import annotations

from rest_framework import serializers

from cognition.vault import MAX_VALUE_CHARS
from skills.models import PolicyStatus

from . import fields


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. consent_required.")
    message = serializers.CharField(help_text="What went wrong and which rule refused it.")
    details = serializers.DictField(help_text="Structured context (field, rule, names, …).")


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


# --- skills ----------------------------------------------------------------------------------


class SkillListItemSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.IntegerField(source="version_number", allow_null=True)
    content_hash = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(
        source="policy_status",
        choices=PolicyStatus.choices,
        help_text="The calling agent's (or the chosen agent's) policy status for this skill.",
    )
    updated_at = serializers.DateTimeField()


class SkillDetailSerializer(serializers.Serializer):
    skill = serializers.CharField(help_text="The skill's name.")
    description = serializers.CharField()
    agent = serializers.CharField()
    status = serializers.ChoiceField(choices=PolicyStatus.choices)
    allowed_domains = serializers.ListField(child=serializers.CharField())
    required_credentials = serializers.ListField(child=serializers.CharField())
    credential_values = serializers.DictField(
        child=serializers.CharField(),
        help_text='Names of skill-stored credentials, each shown as "[set]"; values never leave.',
    )
    tools = serializers.ListField(child=serializers.CharField())
    dependencies = serializers.ListField(child=serializers.CharField())
    inputs = serializers.DictField()
    content_hash = serializers.CharField()
    version = serializers.IntegerField(allow_null=True)
    provenance = serializers.DictField()
    approved_by = serializers.CharField(allow_null=True)
    approved_at = serializers.CharField(allow_null=True)
    approved_content_hash = serializers.CharField()
    approved_version = serializers.IntegerField(allow_null=True)
    reviewed_at = serializers.CharField(allow_null=True)
    reviewed_hash = serializers.CharField()
    rejection_note = serializers.CharField()
    disabled = serializers.BooleanField(
        help_text="Disabled by staff for this agent: status and approval are kept, but no run "
        "of the skill starts until it is enabled again (in the admin)."
    )
    disabled_at = serializers.CharField(allow_null=True)
    disabled_by = serializers.CharField(allow_null=True)
    disabled_reason = serializers.CharField(help_text="Why it was disabled; empty when not.")


class SkillImportSerializer(serializers.Serializer):
    skill_md = fields.Text(
        trim_whitespace=False,
        help_text="The full text of a SKILL.md (frontmatter with name and description, then body).",
    )
    name = serializers.CharField(
        required=False,
        max_length=64,
        help_text=(
            "Install the skill under this name instead of the one in its SKILL.md (written into "
            "it). Use it when a skill of that name is installed from another source (409 "
            "skill_source_conflict)."
        ),
    )


class SkillReviewSerializer(serializers.Serializer):
    skill = serializers.CharField()
    status = serializers.ChoiceField(choices=PolicyStatus.choices)
    reviewed_hash = serializers.CharField()
    reviewed_at = serializers.CharField(allow_null=True)
    facts = serializers.DictField(
        help_text="The deterministic review: domains, credential references, scripts, diff, …"
    )
    proposal = serializers.DictField(
        help_text="What approving now grants (tools, allowed_domains, required_credentials, "
        "dependencies), what it adds to the policy (added) and the warnings to read first."
    )


class ApproveSerializer(serializers.Serializer):
    note = fields.Text(required=False, allow_blank=True, default="", max_length=2000)


class RejectSerializer(serializers.Serializer):
    note = fields.Text(max_length=2000, help_text="Required: what is wrong.")


class SkillUpdateSerializer(serializers.Serializer):
    domains = serializers.ListField(
        child=fields.Text(), required=False, help_text="Replaces allowed_domains."
    )
    credentials = serializers.ListField(
        child=fields.Text(), required=False, help_text="Replaces required_credentials."
    )
    tools = serializers.ListField(child=fields.Text(), required=False)
    dependencies = serializers.ListField(child=fields.Text(), required=False)
    inputs = serializers.DictField(required=False, help_text="JSON schema of the inputs.")
    credential_values = serializers.DictField(
        child=fields.Text(max_length=MAX_VALUE_CHARS),
        required=False,
        write_only=True,
        help_text="Write-only: skill-stored values for names in credentials.",
    )
    clear_credential_values = serializers.ListField(
        child=fields.Text(), required=False, help_text="Names whose values to remove."
    )
    reason = fields.Text(required=False, allow_blank=True, default="", max_length=2000)

    def validate(self, attrs: dict) -> dict:
        if not (set(attrs) - {"reason"}):
            raise serializers.ValidationError("Give at least one field to update.")
        return attrs


# --- credentials -----------------------------------------------------------------------------


class CredentialSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.SerializerMethodField(
        help_text='Always "[set]"; values are never returned.'
    )
    updated_at = serializers.DateTimeField()

    def get_value(self, obj: object) -> str:
        return "[set]"


class CredentialWriteSerializer(serializers.Serializer):
    value = fields.Text(
        write_only=True,
        trim_whitespace=False,
        max_length=MAX_VALUE_CHARS,
        help_text="The secret; stored encrypted, never returned.",
    )


# --- agents ----------------------------------------------------------------------------------


class AgentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    energy = serializers.FloatField(help_text="Current level, 0.0-1.0, regeneration included.")
    energy_band = serializers.CharField(
        help_text="all | no_browser | oneshot_only | exhausted (seed 001 energy gating)."
    )
    regen_per_hour = serializers.FloatField()
    trust_level = serializers.CharField()
    trusted_for_relayed_consent = serializers.BooleanField()


# --- tokens ----------------------------------------------------------------------------------


class IssuedAgentTokenSerializer(serializers.Serializer):
    agent = serializers.CharField()
    token = serializers.CharField(help_text="Shown once; only its hash is stored.")
    prefix = serializers.CharField(help_text="First characters, to recognise the token later.")


class PersonalTokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(source="token_prefix")
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


class PersonalTokenCreateSerializer(serializers.Serializer):
    name = fields.Text(max_length=100, help_text="What the token is for, e.g. 'laptop'.")


class IssuedPersonalTokenSerializer(PersonalTokenSerializer):
    token = serializers.CharField(help_text="Shown once; only its hash is stored.")


# --- cursor-paginated lists (cognition.api.pagination.NameCursorPagination) -----------------


def _page_of(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    return type(
        name,
        (serializers.Serializer,),
        {
            "next": serializers.URLField(allow_null=True, help_text="Link to the next page."),
            "previous": serializers.URLField(
                allow_null=True, help_text="Link to the previous page."
            ),
            "results": item(many=True),
        },
    )


SkillPageSerializer = _page_of(SkillListItemSerializer, "SkillPageSerializer")
CredentialPageSerializer = _page_of(CredentialSerializer, "CredentialPageSerializer")
AgentPageSerializer = _page_of(AgentSerializer, "AgentPageSerializer")
