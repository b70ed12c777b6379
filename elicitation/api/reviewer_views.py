"""The reviewer API: what the browser pages do, for scripts and tests (session or `rhr_` token auth)."""

from uuid import UUID

from django.db.models import prefetch_related_objects
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from elicitation.api import serializers as s
from elicitation.api.authentication import (
    IsReviewer,
    ReviewerRequest,
    ReviewerTokenAuthentication,
    SessionAuthentication,
)
from elicitation.api.throttling import ReviewerRateThrottle
from elicitation.models import TERMINAL_STATUSES, ElicitationRequest, Queue, Status
from elicitation.queue import access, audit, selectors, transitions
from elicitation.queue.errors import InvalidInput

ERRORS = {code: OpenApiResponse(s.ErrorSerializer) for code in (400, 401, 403, 404, 409)}
PAGE_SIZE = 50
MAX_PAGE = 100_000


class ReviewerAPIView(APIView):
    authentication_classes = [ReviewerTokenAuthentication, SessionAuthentication]
    permission_classes = [IsReviewer]
    # 429 with Retry-After past REVIEWER_RATE, counted across processes.
    throttle_classes = [ReviewerRateThrottle]

    def reviewable_queue(self, slug: str) -> Queue:
        return access.reviewable_queue(self.request.user, slug)

    def reviewable_request(self, request_id: UUID) -> ElicitationRequest:
        return access.reviewable_request(self.request.user, request_id)

    def answer(self, found: ElicitationRequest, code: int = status.HTTP_200_OK) -> Response:
        """`found` as the service returned it: services hand back the row as they left it."""
        return Response(s.ReviewRequestSerializer(found).data, status=code)


class QueueListView(ReviewerAPIView):
    @extend_schema(
        operation_id="review_queues_list",
        responses={200: s.QueueSummarySerializer(many=True), **ERRORS},
        summary="Queues this reviewer belongs to, with counts",
    )
    def get(self, request: ReviewerRequest) -> Response:
        return Response(s.QueueSummarySerializer(selectors.queue_summaries(request.user), many=True).data)


class QueueRequestsView(ReviewerAPIView):
    @extend_schema(
        operation_id="review_queue_requests",
        parameters=[
            OpenApiParameter("status", str, enum=["open", "pending", "claimed", "closed"]),
            OpenApiParameter("page", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}),
        ],
        responses={200: s.ReviewRequestSerializer(many=True), **ERRORS},
        summary="A queue's requests in review order (priority, then age)",
    )
    def get(self, request: Request, slug: str) -> Response:
        queue = self.reviewable_queue(slug)
        which = request.query_params.get("status", "open")
        statuses = {
            "open": (Status.PENDING, Status.CLAIMED),
            "pending": (Status.PENDING,),
            "claimed": (Status.CLAIMED,),
            "closed": TERMINAL_STATUSES,
        }.get(which)
        if statuses is None:
            raise InvalidInput(
                "Unknown status filter.", {"status": "must be open, pending, claimed or closed"}
            )
        try:
            page = max(1, int(request.query_params.get("page", "1")))
        except ValueError:
            raise InvalidInput("page must be a whole number.", {"page": "must be a whole number"}) from None
        if page > MAX_PAGE:  # an OFFSET past 64 bits is a database error, not an empty page
            raise InvalidInput("page is out of range.", {"page": f"at most {MAX_PAGE}"})
        rows = selectors.queue_requests_window(
            queue, statuses=statuses, start=(page - 1) * PAGE_SIZE, size=PAGE_SIZE
        )
        prefetch_related_objects(rows, "drafts")
        return Response(s.ReviewRequestSerializer(rows, many=True).data)


class ClaimNextView(ReviewerAPIView):
    @extend_schema(
        operation_id="review_claim_next",
        request=None,
        responses={200: s.ReviewRequestSerializer, 204: None, **ERRORS},
        summary="Claim the queue's most urgent pending request (204 when none is waiting)",
    )
    def post(self, request: ReviewerRequest, slug: str) -> Response:
        queue = self.reviewable_queue(slug)
        claimed = transitions.claim_next(queue, user=request.user)
        if claimed is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return self.answer(claimed)


class ReviewRequestDetailView(ReviewerAPIView):
    @extend_schema(
        operation_id="review_request_retrieve",
        responses={200: s.ReviewRequestSerializer, **ERRORS},
        summary="A request as the reviewer sees it, with questions and shared drafts",
    )
    def get(self, request: ReviewerRequest, request_id: UUID) -> Response:
        found = self.reviewable_request(request_id)
        audit.record_view(found, user=request.user)  # a sensitive view is audited, explicitly
        return self.answer(found)


def transition_view(operation: str, summary: str, service_name: str) -> type[ReviewerAPIView]:
    """Claim, release, heartbeat and take-over share one shape: POST, no body, the request back."""

    class TransitionView(ReviewerAPIView):
        @extend_schema(
            operation_id=f"review_request_{operation}",
            request=None,
            responses={200: s.ReviewRequestSerializer, **ERRORS},
            summary=summary,
        )
        def post(self, request: Request, request_id: UUID) -> Response:
            found = self.reviewable_request(request_id)
            if operation == "takeover":
                access.check_supervisor(found.queue, request.user)
            service = getattr(transitions, service_name)
            keyword = "supervisor" if operation == "takeover" else "user"
            return self.answer(service(request_id, **{keyword: request.user}))

    TransitionView.__name__ = f"{operation.title()}View"
    return TransitionView


ClaimView = transition_view("claim", "Claim a request", "claim_request")
ReleaseView = transition_view("release", "Release a claim back to the queue", "release_claim")
HeartbeatView = transition_view("heartbeat", "Renew the claim's lease", "renew_claim")
TakeOverView = transition_view("takeover", "Supervisor: take over someone else's claim", "take_over_claim")


class DraftView(ReviewerAPIView):
    @extend_schema(
        operation_id="review_request_draft",
        request=s.SaveDraftSerializer,
        responses={200: s.DraftSerializer, **ERRORS},
        summary="Save one question's shared draft, submitted answer or skip",
    )
    def post(self, request: ReviewerRequest, request_id: UUID) -> Response:
        self.reviewable_request(request_id)
        body = s.SaveDraftSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        draft = transitions.save_draft(
            request_id,
            user=request.user,
            question_id=body.validated_data["question"],
            value=body.validated_data.get("value"),
            state=body.validated_data["state"],
        )
        return Response(s.DraftSerializer(draft).data)


class RespondView(ReviewerAPIView):
    @extend_schema(
        operation_id="review_request_respond",
        request=s.RespondSerializer,
        responses={200: s.ReviewRequestSerializer, **ERRORS},
        summary="Answer: accept with content (or the submitted drafts), decline or cancel",
    )
    def post(self, request: ReviewerRequest, request_id: UUID) -> Response:
        found = self.reviewable_request(request_id)
        body = s.RespondSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        answered = transitions.respond(
            request_id,
            user=request.user,
            action=body.validated_data["action"],
            content=body.validated_data.get("content"),
            loaded=found,
        )
        return self.answer(answered)
