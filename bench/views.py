"""Bench-only views, mounted by bench/urls.py and never by reviewhub/urls.py.

- `baseline_insert`: the floor for intake, a plain Django view that parses the same JSON body and inserts the
  same single row, with no authentication, validation, audit row or push. Intake's cost is judged against it.
- `respond_and_time_commit`: answers a claimed request through the real service (`transitions.respond`) and reports
  the moment its transaction committed, so push latency is measured from the commit, not from the HTTP reply.
  (For that moment the module wraps `pushes.send_to_groups` in the bench server: see below.)
"""

import json
import threading
import time
from datetime import timedelta
from uuid import UUID

from django.contrib.auth import get_user_model
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from elicitation.delivery import pushes
from elicitation.models import ElicitationRequest
from elicitation.queue import clock, transitions


@csrf_exempt
@require_POST
def baseline_insert(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    row = ElicitationRequest.objects.create(
        queue_id=int(request.headers["X-Bench-Queue"]),
        agent_id=int(request.headers["X-Bench-Agent"]),
        message=body["message"],
        mode=body.get("mode", "form"),
        requested_schema=body.get("requestedSchema"),
        context=body.get("context") or {},
        priority=body.get("priority", 0),
        deadline=clock.now() + timedelta(seconds=body.get("expiresIn", 3600)),
    )
    return JsonResponse({"id": str(row.id), "status": row.status}, status=201)


# The moment an answer's transaction committed is when its pushes start to leave: the push batch is the
# transaction's first on-commit hook. It is noted by wrapping the function that sends them, not by opening an outer
# transaction.atomic() in the view, which would make the service's own transaction a savepoint: two round trips
# (SAVEPOINT, RELEASE) that the reviewer API does not pay.
commit_seen = threading.local()
_send_to_groups = pushes.send_to_groups


def _noting_commit(batch: list[pushes.Push]) -> None:
    if getattr(commit_seen, "at", None) is None:
        # time.monotonic() is CLOCK_MONOTONIC: one clock for every process on this machine.
        commit_seen.at = time.monotonic()
    _send_to_groups(batch)


pushes.send_to_groups = _noting_commit


@csrf_exempt
@require_POST
def respond_and_time_commit(request: HttpRequest, request_id: UUID) -> JsonResponse:
    user = get_user_model().objects.get(pk=int(request.headers["X-Bench-User"]))
    commit_seen.at = None
    transitions.respond(request_id, user=user, action="decline")
    return JsonResponse({"id": str(request_id), "committed_at": commit_seen.at})
