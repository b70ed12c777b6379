"""The agent API: create, read (long-poll), withdraw, the event feed. Views parse input and call one service."""

from typing import Any
from uuid import UUID

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers as drf_serializers
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from elicitation.api import serializers as s
from elicitation.api.authentication import AgentKeyAuthentication, IsAgent
from elicitation.api.create_body import create_arguments, idempotency_key
from elicitation.api.throttling import AgentRateThrottle
from elicitation.delivery import tickets
from elicitation.models import Agent, ElicitationRequest
from elicitation.queue import access, selectors, transitions
from elicitation.queue.errors import InvalidInput

ERRORS = {code: OpenApiResponse(s.ErrorSerializer) for code in (400, 401, 404, 409, 413)}
NON_NEGATIVE = {"type": "integer", "minimum": 0}
WAIT = OpenApiParameter(
    "wait", NON_NEGATIVE, description="Long-poll: wait up to N seconds for a change (capped)."
)


class AgentAPIView(APIView):
    authentication_classes = [AgentKeyAuthentication]
    permission_classes = [IsAgent]
    # 429 with Retry-After past AGENT_RATE, counted across processes.
    throttle_classes = [AgentRateThrottle]

    @property
    def agent(self) -> Agent:
        assert isinstance(self.request.auth, Agent)
        return self.request.auth

    def own_request(self, request_id: UUID) -> ElicitationRequest:
        return access.owned_request(self.agent.pk, request_id)


def parse_non_negative_int(raw: str | None, name: str) -> int:
    if raw is None or raw == "":
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number.", {name: "must be a whole number"}) from None
    if value < 0:
        raise InvalidInput(f"{name} must not be negative.", {name: "must not be negative"})
    return value


class RequestListView(AgentAPIView):
    @extend_schema(
        operation_id="requests_create",
        request=s.CreateRequestSerializer,
        parameters=[
            OpenApiParameter("Idempotency-Key", {"type": "string", "maxLength": 200}, OpenApiParameter.HEADER)
        ],
        responses={201: s.RequestSerializer, 200: s.RequestSerializer, **ERRORS},
        summary="Queue an MCP elicitation for a human reviewer",
    )
    def post(self, request: Request) -> Response:
        arguments = create_arguments(request.data)
        key = idempotency_key(request.headers)
        created_request, created = transitions.create_request(
            agent=self.agent,
            **arguments,
            idempotency_key=key,
            fingerprint=transitions.body_fingerprint(dict(request.data)) if key else "",
        )
        return Response(
            s.RequestSerializer(created_request).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        operation_id="requests_list",
        parameters=[OpenApiParameter("status", str, enum=["open", "closed", "all"])],
        responses={200: s.RequestSerializer(many=True), **ERRORS},
        summary="The agent's requests, newest first (open ones by default)",
    )
    def get(self, request: Request) -> Response:
        which = request.query_params.get("status", "open")
        if which not in {"open", "closed", "all"}:
            raise InvalidInput("Unknown status filter.", {"status": "must be open, closed or all"})
        rows = selectors.agent_requests(self.agent.pk, which)
        return Response(s.RequestSerializer(rows, many=True, context=s.expected_wait_context(rows)).data)


class RequestDetailView(AgentAPIView):
    @extend_schema(
        operation_id="requests_retrieve",
        parameters=[WAIT],
        responses={200: s.RequestSerializer, **ERRORS},
        summary="A request's status and, once closed, its MCP ElicitResult",
    )
    def get(self, request: Request, request_id: UUID) -> Response:
        parse_non_negative_int(request.query_params.get("wait"), "wait")
        # Waiting (`wait`) happened in front of Django, in delivery/long_poll.py; this only reads.
        found = self.own_request(request_id)
        return Response(s.RequestSerializer(found, context=s.expected_wait_context([found])).data)


class RequestCancelView(AgentAPIView):
    @extend_schema(
        operation_id="requests_cancel",
        request=None,
        responses={200: s.RequestSerializer, **ERRORS},
        summary="Withdraw an open request (the agent's turn ended)",
    )
    def post(self, request: Request, request_id: UUID) -> Response:
        self.own_request(request_id)
        withdrawn = transitions.withdraw_request(request_id, agent=self.agent)
        return Response(s.RequestSerializer(withdrawn).data)


class UrlFlowCompleteView(AgentAPIView):
    @extend_schema(
        operation_id="requests_url_complete",
        request=s.UrlFlowCompleteSerializer,
        responses={202: None, **ERRORS},
        summary="Report that an out-of-band URL flow finished (MCP notifications/elicitation/complete)",
    )
    def post(self, request: Request) -> Response:
        body = s.UrlFlowCompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if not data.get("elicitationId") and not data.get("requestId"):
            raise InvalidInput("Name the flow.", {"elicitationId": "elicitationId or requestId is required"})
        # Unknown or already-completed ids are ignored without error, as the MCP spec requires.
        transitions.report_url_flow_complete(
            self.agent, request_id=data.get("requestId"), elicitation_id=data.get("elicitationId", "")
        )
        return Response(status=status.HTTP_202_ACCEPTED)


class EventFeedView(AgentAPIView):
    @extend_schema(
        operation_id="events_list",
        parameters=[
            OpenApiParameter("after", NON_NEGATIVE, description="Cursor of the last event seen (0 = start)."),
            WAIT,
        ],
        responses={200: s.EventFeedSerializer, **ERRORS},
        summary="The agent's durable, ordered event feed",
    )
    def get(self, request: Request) -> Response:
        after = parse_non_negative_int(request.query_params.get("after"), "after")
        parse_non_negative_int(request.query_params.get("wait"), "wait")
        events = selectors.agent_events_after(self.agent.pk, after)
        payload: dict[str, Any] = {
            "events": [event.payload for event in events],
            "cursor": events[-1].seq if events else after,
        }
        return Response(payload)


class WsTicketView(AgentAPIView):
    @extend_schema(
        operation_id="ws_ticket_create",
        request=None,
        responses={
            201: inline_serializer(
                "WsTicket",
                {
                    "ticket": drf_serializers.CharField(help_text="Pass as /ws/agent/?ticket=…"),
                    "expiresIn": drf_serializers.IntegerField(help_text="Seconds the ticket stays valid."),
                },
            ),
            **ERRORS,
        },
        summary="A single-use WebSocket ticket, for clients that cannot send an Authorization header",
    )
    def post(self, request: Request) -> Response:
        return Response(
            {"ticket": tickets.issue_ticket(self.agent), "expiresIn": tickets.TICKET_MAX_AGE_SECONDS},
            status=status.HTTP_201_CREATED,
        )
