"""Envelopes of the REST API. Serializers check shapes; services check the domain."""

import copy
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.validators import URLValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from elicitation.models import Action, DraftState, ElicitationRequest, Mode
from elicitation.queue import browser_urls, clock, expected_wait, quorum

_url_shape = URLValidator(schemes=["http", "https"])


def http_url(value: str) -> None:
    """An http(s) URL that reads the same to a browser as to a person (`queue/browser_urls.py`): refused with the
    reason when a browser would open a different host, or when it holds control or bidi-override characters."""
    problem = browser_urls.intake_problem(value)
    if problem is not None:
        raise serializers.ValidationError(problem)
    _url_shape(value)


MAX_EXPIRES_IN = 30 * 24 * 3600
# MCP params may carry protocol metadata we store nowhere; anything else unknown is a typo worth a 400.
IGNORED_KEYS = {"_meta"}


class ShallowFieldCopies(serializers.Serializer[Any]):
    """DRF deep-copies every declared field for each serializer instance, which re-runs each field's `__init__`:
    on `POST /api/v1/requests` that was 17 % of the view's CPU in-process. A declared field holds no per-instance
    state until it is bound, so each instance gets a shallow copy to bind instead. Nested serializers keep DRF's
    deep copy: their own bound fields and validation state are per instance."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {
            name: copy.deepcopy(field) if isinstance(field, serializers.BaseSerializer) else copy.copy(field)
            for name, field in self._declared_fields.items()
        }


class StrictSerializer(ShallowFieldCopies):
    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields) - IGNORED_KEYS
            if unknown:
                raise serializers.ValidationError({key: ["unknown field"] for key in sorted(unknown)})
        return super().to_internal_value(data)


# The core of the MCP requestedSchema subset, for the OpenAPI document and generated clients. The server accepts
# the whole subset (enum/oneOf selects, multi-selects, formats, bounds, defaults) and names the path of anything
# outside it in a 400.
PRIMITIVE_PROPERTY = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string", "enum": ["string", "number", "integer", "boolean"]},
        "title": {"type": "string", "maxLength": 200},
        "description": {"type": "string", "maxLength": 2000},
    },
}
REQUESTED_SCHEMA = {
    "type": "object",
    "description": "MCP ElicitRequest requestedSchema: a flat object of primitive properties.",
    "required": ["type", "properties"],
    "properties": {
        "type": {"type": "string", "enum": ["object"]},
        "properties": {
            "type": "object",
            "maxProperties": 50,
            "additionalProperties": PRIMITIVE_PROPERTY,
        },
        "required": {"type": "array", "items": {"type": "string"}},
    },
}


@extend_schema_field(REQUESTED_SCHEMA)
class RequestedSchemaField(serializers.DictField):
    pass


class CreateRequestSerializer(StrictSerializer):
    message = serializers.CharField(max_length=settings.MAX_MESSAGE_LENGTH, trim_whitespace=False)
    mode = serializers.ChoiceField(choices=Mode.choices, default=Mode.FORM)
    requestedSchema = RequestedSchemaField(required=False)
    url = serializers.CharField(required=False, max_length=2048, validators=[http_url])
    elicitationId = serializers.CharField(required=False, max_length=200)
    queue = serializers.SlugField(max_length=64)
    priority = serializers.IntegerField(default=0, min_value=-1000, max_value=1000)
    expiresIn = serializers.IntegerField(required=False, min_value=1, max_value=MAX_EXPIRES_IN)
    context = serializers.DictField(required=False)  # type: ignore[assignment]  # DRF pops declared fields
    callbackUrl = serializers.CharField(required=False, max_length=2048, validators=[http_url])

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["mode"] == Mode.FORM:
            if "requestedSchema" not in attrs:
                raise serializers.ValidationError({"requestedSchema": "is required in form mode"})
            if "url" in attrs:
                raise serializers.ValidationError({"url": "only allowed in url mode"})
        else:
            if "url" not in attrs:
                raise serializers.ValidationError({"url": "is required in url mode"})
            if "requestedSchema" in attrs:
                raise serializers.ValidationError({"requestedSchema": "only allowed in form mode"})
        return attrs


class CreateFlowSerializer(StrictSerializer):
    message = serializers.CharField(max_length=settings.MAX_MESSAGE_LENGTH, trim_whitespace=False)
    requestedSchema = serializers.DictField(
        help_text='MCP requestedSchema subset; text properties may carry "sensitive": true.'
    )
    queue = serializers.SlugField(max_length=64)
    elicitationId = serializers.CharField(required=False, max_length=200)
    priority = serializers.IntegerField(default=0, min_value=-1000, max_value=1000)
    expiresIn = serializers.IntegerField(required=False, min_value=1, max_value=MAX_EXPIRES_IN)
    context = serializers.DictField(required=False)  # type: ignore[assignment]  # DRF pops declared fields
    callbackUrl = serializers.CharField(required=False, max_length=2048, validators=[http_url])


class ElicitResultSerializer(ShallowFieldCopies):
    """MCP ElicitResult: content only on accept of a form."""

    action = serializers.ChoiceField(choices=Action.choices)
    content = serializers.DictField(required=False)


class RequestSerializer(ShallowFieldCopies):
    id = serializers.UUIDField()
    status = serializers.CharField()
    queue = serializers.CharField(source="queue.slug")
    mode = serializers.CharField()
    message = serializers.CharField()
    requestedSchema = serializers.JSONField(source="requested_schema", allow_null=True)
    url = serializers.CharField()
    elicitationId = serializers.CharField(source="elicitation_id")
    priority = serializers.IntegerField()
    context = serializers.JSONField()  # type: ignore[assignment]
    createdAt = serializers.DateTimeField(source="created_at")
    deadline = serializers.DateTimeField()
    closedAt = serializers.DateTimeField(source="closed_at", allow_null=True)
    overdue = serializers.SerializerMethodField(
        help_text="Open past its deadline: the sweeper is about to close it with the queue's expiry outcome."
    )
    result = serializers.SerializerMethodField()

    def get_overdue(self, request: ElicitationRequest) -> bool:
        return request.is_open and request.deadline <= clock.now()

    @extend_schema_field(ElicitResultSerializer(allow_null=True))
    def get_result(self, request: ElicitationRequest) -> dict[str, Any] | None:
        return request.result()

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        detail = status_detail(instance)
        if detail is not None:
            data["statusDetail"] = detail
        # Only where the caller read the estimates (`expected_wait_context`): rendering reads no rows. The
        # serializer's context, through super(): this class declares a field named `context`.
        wait = super().context.get(EXPECTED_WAITS, {}).get(instance.pk)
        if wait is not None and instance.is_open:
            data["expectedWaitSeconds"] = wait
        return data


# Serializer context: {request id: whole seconds it will likely wait}, for `expectedWaitSeconds`.
EXPECTED_WAITS = "expected_waits"


def expected_wait_context(requests: Iterable[ElicitationRequest]) -> dict[str, Any]:
    """Context for RequestSerializer that adds `expectedWaitSeconds` to open requests (queue/expected_wait.py:
    one snapshot per queue, kept a few seconds). The agent's GETs and MCP pass it; the create's response and the
    reviewer API do not, so intake and the reviewer's listings cost what they did."""
    return {EXPECTED_WAITS: expected_wait.seconds_by_request(requests)}


def status_detail(request: ElicitationRequest) -> dict[str, Any] | None:
    """What is deciding an open request, or what decided a closed one, read from the row alone (this also renders
    the closing push's body inside its transaction): a quorum's progress while it runs ("1 of 2: alice") and its
    tally once it decided, the rule that answered at intake (a queue's answer rule or a remembered decision), or
    a scripted queue's reason for declining. None when one person decides, or when the request closed otherwise
    (expired, withdrawn): a queue's default quorum is copied onto every request, so "0 of 2" alone says nothing."""
    if request.is_open:
        return quorum.progress(request.policy)
    decision = (request.result_meta or {}).get(quorum.DECISION_META)
    if not isinstance(decision, dict):
        return None
    rule = decision.get("rule")
    if isinstance(rule, dict):
        name = rule.get("name") or f"#{rule.get('id')}"
        return {
            "kind": "rule",
            "text": f"answered by rule: {name}",
            "rule": {"id": rule.get("id"), "name": name, "action": rule.get("action")},
        }
    if isinstance(decision.get("reason"), str):
        return {
            "kind": "policy",
            "text": f"declined by the queue's policy: {decision['reason']}",
            "reason": decision["reason"],
        }
    if "required" in decision:  # quorum.result_meta: the approvals (or the veto) decided
        return quorum.progress(request.policy)
    return None


class AgentEventSerializer(ShallowFieldCopies):
    type = serializers.CharField()
    id = serializers.UUIDField()
    cursor = serializers.IntegerField()
    status = serializers.CharField()
    result = ElicitResultSerializer(required=False)


class EventFeedSerializer(ShallowFieldCopies):
    events = AgentEventSerializer(many=True)
    cursor = serializers.IntegerField(help_text="Pass as `after` to continue the feed.")


class UrlFlowCompleteSerializer(StrictSerializer):
    elicitationId = serializers.CharField(required=False, max_length=200)
    requestId = serializers.UUIDField(required=False)


class QuestionSerializer(ShallowFieldCopies):
    id = serializers.CharField()
    kind = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    required = serializers.BooleanField()  # type: ignore[assignment]
    format = serializers.CharField(allow_null=True)
    min = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)
    default = serializers.JSONField(allow_null=True)
    options = serializers.ListField(child=serializers.DictField())


class DraftSerializer(ShallowFieldCopies):
    question = serializers.CharField(source="question_id")
    value = serializers.JSONField(allow_null=True)
    state = serializers.ChoiceField(choices=DraftState.choices)
    updatedBy = serializers.CharField(source="updated_by.username", allow_null=True, default=None)
    updatedAt = serializers.DateTimeField(source="updated_at")


class ReviewRequestSerializer(RequestSerializer):
    agent = serializers.CharField(source="agent.name")
    questions = QuestionSerializer(many=True)
    claimedBy = serializers.CharField(source="claimed_by.username", allow_null=True, default=None)
    claimedAt = serializers.DateTimeField(source="claimed_at", allow_null=True)
    leaseExpiresAt = serializers.DateTimeField(source="lease_expires_at", allow_null=True)
    drafts = DraftSerializer(many=True, source="drafts.all")


class QueueSummarySerializer(ShallowFieldCopies):
    slug = serializers.CharField(source="queue.slug")
    name = serializers.CharField(source="queue.name")
    pending = serializers.IntegerField()
    claimed = serializers.IntegerField()
    overdue = serializers.IntegerField()
    oldestPendingAt = serializers.DateTimeField(source="oldest_pending_at", allow_null=True)


class SaveDraftSerializer(StrictSerializer):
    # A question id is the agent's property name verbatim: leading or trailing spaces are part of it.
    question = serializers.CharField(max_length=64, trim_whitespace=False)
    value = serializers.JSONField(required=False, allow_null=True)
    state = serializers.ChoiceField(choices=DraftState.choices, default=DraftState.DRAFT)


class RespondSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=Action.choices)
    content = serializers.DictField(required=False, allow_null=True)


class ErrorSerializer(ShallowFieldCopies):
    code = serializers.CharField()
    detail = serializers.CharField()
    fields = serializers.DictField(child=serializers.CharField(), required=False)  # type: ignore[assignment]
    status = serializers.CharField(required=False)
