"""What the browser needs to get a reviewer's attention (static/reviewhub/notify.js): how many requests wait in
my queues, the newest of them and any assigned to me by the escalation chain (for desktop notifications), and
the POST that records a notification shown (the browser channel's time to a human). GET never writes."""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from elicitation.delivery import notices
from elicitation.models import ElicitationRequest, Mode, Status
from elicitation.queue import access, clock
from elicitation.reviewer.errors import domain_errors_as_pages
from elicitation.reviewer.signed_in import SignedInRequest

LATEST = 20
EXCERPT = 120


def _item(request: ElicitationRequest, kind: str) -> dict[str, Any]:
    # URL-mode requests (hosted secret flows too) are announced without their content, as in Slack and e-mail.
    body = "A request needs you." if request.mode == Mode.URL else " ".join(request.message.split())[:EXCERPT]
    return {
        "key": f"{request.pk}:{kind}",
        "id": str(request.pk),
        "title": f"{request.queue.name}: " + ("assigned to you" if kind == "assigned" else "new request"),
        "body": body,
        "url": f"/requests/{request.pk}/",
    }


@never_cache
@login_required
@require_GET
def waiting(request: SignedInRequest) -> JsonResponse:
    """`{"waiting": N, "items": [...], "poll": seconds}`: N pending (unclaimed, not overdue) requests in my queues."""
    now = clock.now()
    queues = access.reviewer_queues(request.user)
    pending = ElicitationRequest.objects.filter(queue__in=queues, status=Status.PENDING, deadline__gt=now)
    newest = pending.select_related("queue").order_by("-created_at")[:LATEST]
    assigned = (
        ElicitationRequest.objects.filter(
            status=Status.CLAIMED, claimed_by_id=request.user.pk, deadline__gt=now
        )
        .filter(events__kind="reassigned_to_supervisor")
        .select_related("queue")
        .distinct()[:LATEST]
    )
    items = [_item(r, "assigned") for r in assigned] + [_item(r, "new") for r in newest]
    return JsonResponse({"waiting": pending.count(), "items": items, "poll": settings.BROWSER_POLL_SECONDS})


@login_required
@domain_errors_as_pages
@require_POST
def shown(request: SignedInRequest, request_id: Any) -> JsonResponse:
    """The page showed a desktop notification about this request: recorded once per reviewer and request."""
    found = access.reviewable_request(request.user, request_id)
    return JsonResponse({"recorded": notices.record_browser_notice(found, request.user)})
