"""Slack's interaction endpoint (`POST /api/v1/slack/interactions`): buttons and modal submissions.

Every request is verified before anything is read from it: slack_sdk's SignatureVerifier checks the HMAC of the
raw body against SLACK_SIGNING_SECRET and refuses a timestamp more than five minutes from ReviewHub's clock; a
signature seen before inside that window is a replay and is refused too. The `payload` field is then read as
untrusted JSON (lone surrogates and deep nesting refused) and its shape checked (`slack_interactions.check_payload`):
a signed payload Slack would never send is a 400 in the API's error vocabulary, `{code, detail, fields}` naming the
field, and nothing is done. What a well-formed payload asks for is done by delivery/slack_interactions.py through
the same transitions as the web page, each button or form charged to the reviewer's REVIEWER_RATE, the budget the
reviewer API and the pages draw on (`reviewer_over_rate`).
"""

import logging
from urllib.parse import parse_qs

from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk.signature import Clock, SignatureVerifier

from elicitation.api import throttling
from elicitation.api.errors import domain_error_body, error_body, http_status, throttled_body
from elicitation.delivery import slack_interactions
from elicitation.queue import clock, untrusted_json
from elicitation.queue.errors import InvalidInput

logger = logging.getLogger(__name__)

REPLAY_WINDOW_SECONDS = 5 * 60  # SignatureVerifier's own window; remembered signatures live as long


class DomainClock(Clock):
    """SignatureVerifier's clock, read from the domain clock so tests can move it."""

    def now(self) -> float:
        return clock.now().timestamp()


def _refuse(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse(error_body(code, detail), status=status)


def payload_text(body: bytes) -> str:
    """The `payload` field of Slack's form body, or InvalidInput. The body is UTF-8: its signature was checked on
    the decoded text."""
    try:
        form = parse_qs(body.decode(), strict_parsing=True, keep_blank_values=True)
    except ValueError:
        raise InvalidInput(
            "The body must be a form with a JSON `payload` field.", {"$": "is not a form"}
        ) from None
    if "payload" not in form:
        raise InvalidInput("The body must be a form with a JSON `payload` field.", {"payload": "is required"})
    return form["payload"][0]


def parsed_payload(text: str) -> object:
    """`payload` as JSON, or InvalidInput naming where it is malformed, holds a lone surrogate or nests too deep."""
    try:
        return untrusted_json.loads(text)
    except untrusted_json.JSONRefused as refused:
        where = refused.path
        field = (
            "payload" if where == "$" else f"payload{where}" if where.startswith("[") else f"payload.{where}"
        )
        raise InvalidInput("`payload` must be JSON.", {field: refused.reason}) from None


def reviewer_over_rate(user: User) -> str | None:
    """One call against the reviewer's REVIEWER_RATE, counted as `ReviewerRateThrottle` counts an API call: None
    within it, else the API's words for the refusal, which name the seconds to wait."""
    rate = getattr(settings, throttling.ReviewerRateThrottle.rate_setting, None)
    retry_after = throttling.charge(throttling.ReviewerRateThrottle.scope, str(user.pk), rate)
    return None if retry_after is None else str(throttled_body(retry_after)["detail"])


def verified(request: HttpRequest) -> bool:
    verifier = SignatureVerifier(settings.SLACK_SIGNING_SECRET, clock=DomainClock())
    timestamp = request.headers.get("X-Slack-Request-Timestamp")
    signature = request.headers.get("X-Slack-Signature")
    try:
        return verifier.is_valid(request.body, timestamp, signature)
    except ValueError:  # a timestamp that is not a number
        return False


@csrf_exempt
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    if not settings.SLACK_SIGNING_SECRET:
        return _refuse(404, "not_found", "Slack is not configured.")
    if not verified(request):
        return _refuse(401, "bad_signature", "The Slack signature or its timestamp is not valid.")
    signature = request.headers.get("X-Slack-Signature", "")
    if not cache.add(f"slack-signature:{signature}", 1, timeout=REPLAY_WINDOW_SECONDS):
        return _refuse(401, "replayed", "This Slack request was already received.")
    try:
        payload = slack_interactions.check_payload(parsed_payload(payload_text(request.body)))
    except InvalidInput as exc:
        return JsonResponse(domain_error_body(exc), status=http_status(exc))
    reply = slack_interactions.handle(payload, reviewer_over_rate)
    if reply.body is None:
        return HttpResponse(status=200)
    return JsonResponse(reply.body)
