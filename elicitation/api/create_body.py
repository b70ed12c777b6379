"""A create's body, mapped once for every door that queues a request: REST (`POST /api/v1/requests`,
`POST /api/v1/flows`), the MCP tools (`ask_reviewer`, `collect_secret`) and any other door that takes the same
MCP-shaped body. The envelope is checked by the REST serializers, so limits, URL checks and the refusal's field
paths and words are the same whichever door the body came through; a refused body raises the domain's `invalid`
error (`InvalidInput`, fields flattened as `{"field.path": "reason"}`), which each door renders as it renders every
other domain error."""

from collections.abc import Mapping
from typing import Any, TypedDict

from elicitation.api.errors import invalid_input
from elicitation.api.serializers import CreateFlowSerializer, CreateRequestSerializer
from elicitation.queue.errors import InvalidInput

MAX_IDEMPOTENCY_KEY = 200


class CreateArguments(TypedDict):
    """`transitions.create_request`'s keyword arguments that come from the body (the door adds the agent and,
    where it has one, the idempotency key)."""

    queue_slug: str
    message: str
    mode: str
    requested_schema: dict[str, Any] | None
    url: str
    elicitation_id: str
    context: dict[str, Any] | None
    callback_url: str
    priority: int
    expires_in: int | None


class FlowArguments(TypedDict):
    """`hosted_flows.create_hosted_flow`'s keyword arguments that come from the body."""

    queue_slug: str
    message: str
    requested_schema: dict[str, Any]
    context: dict[str, Any] | None
    callback_url: str
    priority: int
    expires_in: int | None
    elicitation_id: str


def create_arguments(body: object) -> CreateArguments:
    """The arguments of `transitions.create_request` for a request body (parsed JSON: anything but an object is
    refused too); `InvalidInput` naming the fields if the body is refused."""
    envelope = CreateRequestSerializer(data=body)
    if not envelope.is_valid():
        raise invalid_input(envelope.errors)
    data = envelope.validated_data
    return CreateArguments(
        queue_slug=data["queue"],
        message=data["message"],
        mode=data["mode"],
        requested_schema=data.get("requestedSchema"),
        url=data.get("url", ""),
        elicitation_id=data.get("elicitationId", ""),
        context=data.get("context"),
        callback_url=data.get("callbackUrl", ""),
        priority=data["priority"],
        expires_in=data.get("expiresIn"),
    )


def flow_arguments(body: object) -> FlowArguments:
    """The arguments of `hosted_flows.create_hosted_flow` for a hosted flow's body; `InvalidInput` if refused."""
    envelope = CreateFlowSerializer(data=body)
    if not envelope.is_valid():
        raise invalid_input(envelope.errors)
    data = envelope.validated_data
    return FlowArguments(
        queue_slug=data["queue"],
        message=data["message"],
        requested_schema=data["requestedSchema"],
        context=data.get("context"),
        callback_url=data.get("callbackUrl", ""),
        priority=data["priority"],
        expires_in=data.get("expiresIn"),
        elicitation_id=data.get("elicitationId", ""),
    )


def idempotency_key(headers: Mapping[str, str]) -> str | None:
    """The `Idempotency-Key` header of a REST create, or None; refused when longer than the column holds."""
    key = headers.get("Idempotency-Key") or None
    if key is not None and len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidInput("Idempotency-Key is too long.", {"Idempotency-Key": "at most 200 characters"})
    return key
