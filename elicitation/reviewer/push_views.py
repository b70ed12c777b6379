"""The Web Push door: the service worker, a reviewer's subscriptions (made from the Preferences page by
static/reviewhub/preferences-push.js) and the endpoint a notification's Approve / Reject posts its token to.

Each view only translates: subscriptions are delivery/web_push.py's, tokens and answers delivery/push_actions.py's,
errors the domain's vocabulary mapped to HTTP statuses once (api/errors.py)."""

import functools
import json
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from elicitation.api.errors import domain_error_body, error_body, http_status, throttled_body
from elicitation.delivery import push_actions, web_push
from elicitation.queue.errors import DomainError
from elicitation.reviewer import presenters
from elicitation.reviewer.rate_budget import charge_reviewer_rate, within_reviewer_rate

SERVICE_WORKER = "reviewhub/service-worker.js"
BODY_LIMIT = 8 * 1024


@functools.cache
def _service_worker_source() -> bytes:
    path = finders.find(SERVICE_WORKER)
    if not path:
        raise FileNotFoundError(SERVICE_WORKER)
    with open(str(path), "rb") as source:
        return source.read()


@require_GET
def service_worker(request: HttpRequest) -> HttpResponse:
    """The service worker, served from the site's root so that its scope covers every page (a script under
    /static/ could only control /static/). Revalidated on each check, so a new version reaches browsers."""
    response = HttpResponse(_service_worker_source(), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


def _json_body(request: HttpRequest) -> Any:
    if len(request.body) > BODY_LIMIT:
        raise ValueError({"body": f"must be at most {BODY_LIMIT} bytes"})
    try:
        return json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ValueError({"body": "must be JSON"}) from None


def _invalid(fields: dict[str, str]) -> JsonResponse:
    return JsonResponse(error_body("invalid", "The subscription is not valid.", fields), status=400)


@login_required
@within_reviewer_rate
@require_http_methods(["GET", "POST"])
def subscriptions(request: HttpRequest) -> JsonResponse:
    """GET: the signed-in reviewer's browsers. POST: this browser's `PushSubscription.toJSON()`, saved as theirs."""
    if request.method == "POST":
        if not web_push.configured():
            body = error_body("unavailable", "Web Push is not set up on this ReviewHub.")
            return JsonResponse(body, status=503)
        try:
            given = web_push.check_subscription(_json_body(request))
        except ValueError as exc:
            return _invalid(exc.args[0])
        saved = web_push.subscribe(request.user, given, request.headers.get("User-Agent", ""))
        return JsonResponse(
            {"id": saved.pk, "subscriptions": web_push.subscriptions_of(request.user)}, status=201
        )
    return JsonResponse({"subscriptions": web_push.subscriptions_of(request.user)})


@login_required
@within_reviewer_rate
@require_POST
def unsubscribe(request: HttpRequest, subscription_id: int | None = None) -> HttpResponse:
    """Forget one of the signed-in reviewer's browsers: by id (the list's Remove button, a form) or by endpoint
    (this browser turning push off, JSON). Another reviewer's subscription is never touched: 404."""
    if subscription_id is not None:
        removed = web_push.unsubscribe(request.user, pk=subscription_id)
        if "application/json" not in request.headers.get("Accept", ""):
            if removed:
                messages.success(request, "That browser no longer receives push notifications.")
            return redirect("preferences")
    else:
        try:
            data = _json_body(request)
        except ValueError as exc:
            return _invalid(exc.args[0])
        endpoint = data.get("endpoint") if isinstance(data, dict) else None
        removed = web_push.unsubscribe(request.user, endpoint=endpoint if isinstance(endpoint, str) else "")
    if not removed:
        return JsonResponse(error_body("not_found", "No such subscription of yours."), status=404)
    return JsonResponse({"subscriptions": web_push.subscriptions_of(request.user)})


# The token is the credential (bound to request, reviewer and answer; one-time), not the session cookie: a locked
# phone answers without a signed-in page. A signed-in session still must be the token's reviewer.
@csrf_exempt
@require_POST
def answer(request: HttpRequest, request_id: UUID) -> JsonResponse:
    """A notification's Approve / Reject: `{"token": …}`. 200 with the outcome; 403 a token that is not this
    request's or this reviewer's; 409 one already used or a request already closed; 429 over the rate budget."""
    try:
        data = _json_body(request)
    except ValueError as exc:
        return JsonResponse(error_body("invalid", "The body is not valid.", exc.args[0]), status=400)
    token = data.get("token") if isinstance(data, dict) else None
    try:
        verified = push_actions.verify(token, request_id, presented_by=request.user)
        retry_after = charge_reviewer_rate(verified.user)
        if retry_after is not None:
            response = JsonResponse(throttled_body(retry_after), status=429)
            response["Retry-After"] = str(retry_after)
            return response
        answered = push_actions.redeem(verified)
    except DomainError as exc:
        return JsonResponse(domain_error_body(exc), status=http_status(exc))
    said = presenters.outcome(answered)
    return JsonResponse(
        {
            "request": str(answered.pk),
            "status": answered.status,
            "outcome": said.label if said else "Approved, waiting for the other approvers",
        }
    )
