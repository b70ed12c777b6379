"""Hosted secret flows for agents holding the `flows:secrets` scope: open a flow, read its state, retrieve its
value once. The retrieve response is the only response that ever carries a flow's values."""

from typing import Any
from uuid import UUID

from django.views.decorators.debug import sensitive_variables
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from elicitation.api.agent_views import AgentAPIView
from elicitation.api.create_body import flow_arguments, idempotency_key
from elicitation.api.serializers import CreateFlowSerializer, ErrorSerializer
from elicitation.flows import hosted_flows
from elicitation.models import HostedFlow
from elicitation.queue import clock, transitions

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409, 410)}


class UrlElicitationSerializer(serializers.Serializer[Any]):
    """The MCP ElicitRequestURLParams an MCP server sends its client for this flow."""

    mode = serializers.CharField()
    message = serializers.CharField()
    url = serializers.CharField()
    elicitationId = serializers.CharField()


class FlowSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    url = serializers.SerializerMethodField()
    requestId = serializers.UUIDField(source="request_id")
    status = serializers.SerializerMethodField(help_text="open, submitted, retrieved, expired or purged")
    requestStatus = serializers.CharField(source="request.status")
    queue = serializers.CharField(source="request.queue.slug")
    message = serializers.CharField(source="request.message")
    requestedSchema = serializers.JSONField(source="requested_schema")
    createdAt = serializers.DateTimeField(source="created_at")
    deadline = serializers.DateTimeField(source="request.deadline")
    submittedAt = serializers.DateTimeField(source="submitted_at", allow_null=True)
    retrievedAt = serializers.DateTimeField(source="retrieved_at", allow_null=True)
    elicitation = serializers.SerializerMethodField()

    def get_status(self, flow: HostedFlow) -> str:
        # As the sweeper will leave it: a read never settles the flow itself.
        return hosted_flows.effective_status(flow, self.context.get("now") or clock.now())

    def get_url(self, flow: HostedFlow) -> str:
        return hosted_flows.flow_url(flow.pk)

    @extend_schema_field(UrlElicitationSerializer)
    def get_elicitation(self, flow: HostedFlow) -> dict[str, Any]:
        return {
            "mode": "url",
            "message": flow.request.message,
            "url": hosted_flows.flow_url(flow.pk),
            "elicitationId": flow.request.elicitation_id,
        }


class RetrievedFlowSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    content = serializers.DictField(help_text="The submitted values, MCP content shape. Returned once.")


class FlowAPIView(AgentAPIView):
    def check_permissions(self, request: Request) -> None:
        super().check_permissions(request)
        hosted_flows.require_flows_scope(self.agent)


class FlowListView(FlowAPIView):
    @extend_schema(
        operation_id="flows_create",
        request=CreateFlowSerializer,
        parameters=[
            OpenApiParameter("Idempotency-Key", {"type": "string", "maxLength": 200}, OpenApiParameter.HEADER)
        ],
        responses={201: FlowSerializer, 200: FlowSerializer, **ERRORS},
        summary="Open a hosted secret flow (a URL-mode request whose URL is ReviewHub's own flow page)",
    )
    def post(self, request: Request) -> Response:
        arguments = flow_arguments(request.data)
        key = idempotency_key(request.headers)
        flow, created = hosted_flows.create_hosted_flow(
            agent=self.agent,
            **arguments,
            idempotency_key=key,
            # Marked as a flow body so the same key and body on /requests is a conflict, not a replay.
            fingerprint=transitions.body_fingerprint({"flow": request.data}) if key else "",
        )
        return Response(
            FlowSerializer(flow).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


class FlowDetailView(FlowAPIView):
    @extend_schema(
        operation_id="flows_retrieve_state",
        responses={200: FlowSerializer, **ERRORS},
        summary="A flow's state (never its values)",
    )
    def get(self, request: Request, flow_id: UUID) -> Response:
        flow = hosted_flows.agent_flow(self.agent, flow_id)
        return Response(FlowSerializer(flow, context={"now": clock.now()}).data)


class FlowRetrieveView(FlowAPIView):
    @extend_schema(
        operation_id="flows_retrieve",
        request=None,
        responses={200: RetrievedFlowSerializer, **ERRORS},
        summary="Fetch the submitted values once; the stored ciphertext is destroyed (then 410)",
    )
    @sensitive_variables()
    def post(self, request: Request, flow_id: UUID) -> Response:
        content = hosted_flows.retrieve_hosted_flow(flow_id, agent=self.agent)
        response = Response({"id": str(flow_id), "content": content})
        response["Cache-Control"] = "no-store"
        return response
