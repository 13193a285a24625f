"""GET /api/v1/skills/search/?q= — the skills an agent may use, ranked for a request, with their
scores (skills.index). The path is also where a skill named "search" lives: a request without
`q` is that skill's detail (GET) or deletion (DELETE), as under /skills/<name>/."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from skills.index.search import MAX_K, SkillSearchQueryInvalid, skill_search

from .views import AGENT_PARAM, TRIGGER_PARAM, SkillDetailView, _errors

SEARCH_NAME = "search"


class SkillHitSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField()
    score = serializers.FloatField(help_text="Fused RRF score (hybrid) or BM25 score (lexical).")
    lexical_score = serializers.FloatField(allow_null=True)
    lexical_rank = serializers.IntegerField(allow_null=True)
    dense_score = serializers.FloatField(allow_null=True, help_text="Cosine similarity.")
    dense_rank = serializers.IntegerField(allow_null=True)
    status = serializers.CharField(
        allow_null=True, help_text="The agent's policy status, or not_yet_yours."
    )
    disabled = serializers.BooleanField()


class SkillSearchSerializer(serializers.Serializer):
    agent = serializers.CharField()
    query = serializers.CharField()
    truncated = serializers.BooleanField()
    mode = serializers.ChoiceField(choices=["lexical", "hybrid"])
    k = serializers.IntegerField()
    took_ms = serializers.FloatField()
    dense_error = serializers.CharField(allow_blank=True)
    hits = SkillHitSerializer(many=True)


def _k(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_K:
        raise SkillSearchQueryInvalid(
            f"k must be a whole number from 1 to {MAX_K}.",
            details={"rule": "k-range", "field": "k"},
        )
    return int(raw)


class SkillSearchView(SkillDetailView):
    """Routed with name="search" so that, without `q`, it is the detail of that skill."""

    @extend_schema(
        operation_id="skills_search",
        summary="Skills the agent may use, ranked for a request, with their scores",
        description=(
            "Hybrid retrieval over the agent's skills (its policies and, as not_yet_yours, those "
            "its owner's other agents hold): BM25 always, fused with embedding similarity by "
            "reciprocal rank fusion when EMBEDDINGS_MODEL is set. `q` is required and not blank; "
            "longer than MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS (default 2000) characters is a 400 "
            "with rule query-too-long. Without `q` this path is the skill named 'search'."
        ),
        parameters=[
            AGENT_PARAM,
            OpenApiParameter(
                "q",
                # at least one character that is neither a space nor a control character
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2000,
                    "pattern": r"[^\s\x00-\x1f\x7f]",
                },
                required=True,
                description="The request (up to MOTOR_SKILL_SEARCH_QUERY_MAX_CHARS characters).",
            ),
            OpenApiParameter(
                "k",
                {"type": "integer", "minimum": 1, "maximum": MAX_K},
                description="Most hits (default MOTOR_SKILL_SEARCH_TOP_K, 10).",
            ),
        ],
        responses={200: SkillSearchSerializer, **_errors(400, 401, 404)},
    )
    def get(self, request: Request, name: str = SEARCH_NAME) -> Response:
        if "q" not in request.query_params:
            return super().get(request, name)
        agent = self.scope_agent(request)
        result = skill_search(
            query=request.query_params["q"],
            agent=agent,
            k=_k(request.query_params.get("k")),
            over_limit="refuse",
        )
        return Response({"agent": agent.name, **result.as_dict()})

    @extend_schema(
        operation_id="skills_delete_named_search",
        summary="Delete the skill named 'search' (consent-gated; as DELETE /skills/{name}/)",
        parameters=[AGENT_PARAM, TRIGGER_PARAM],
        request=None,
        responses={204: None, **_errors(401, 403, 404, 409)},
    )
    def delete(self, request: Request, name: str = SEARCH_NAME) -> Response:
        return super().delete(request, name)
