"""Slack's interaction endpoint (`POST /api/v1/slack/interactions`): buttons and modal submissions.

Every request is verified before anything is read from it: slack_sdk's SignatureVerifier checks the HMAC of the
raw body against SLACK_SIGNING_SECRET and refuses a timestamp more than five minutes from ReviewHub's clock; a
signature seen before inside that window is a replay and is refused too. What the payload asks for is then done
by delivery/slack_interactions.py through the same transitions as the web page.
"""

import json
import logging
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk.signature import Clock, SignatureVerifier

from elicitation.delivery import slack_interactions
from elicitation.queue import clock

logger = logging.getLogger(__name__)

REPLAY_WINDOW_SECONDS = 5 * 60  # SignatureVerifier's own window; remembered signatures live as long


class DomainClock(Clock):
    """SignatureVerifier's clock, read from the domain clock so tests can move it."""

    def now(self) -> float:
        return clock.now().timestamp()


def _refuse(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail}, status=status)


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
        raw = parse_qs(request.body.decode(), strict_parsing=True).get("payload", [""])[0]
        payload: Any = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return _refuse(400, "invalid", "The body must be a form with a JSON `payload` field.")
    if not isinstance(payload, dict):
        return _refuse(400, "invalid", "`payload` must be a JSON object.")
    reply = slack_interactions.handle(payload)
    if reply.body is None:
        return HttpResponse(status=200)
    return JsonResponse(reply.body)
