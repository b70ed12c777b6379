"""Passkeys on the reviewer's pages: registering and removing them (the Preferences page's "Passkeys" section,
static/reviewhub/passkeys.js) and the challenge an accept of a step-up request signs (static/reviewhub/request/
step-up.js). The ceremonies and their checks are queue/step_up.py's; these views only translate, with the domain's
errors as JSON bodies (api/errors.py), so a refused ceremony is a 4xx the script can show."""

import json
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from elicitation.api.errors import domain_error_body, error_body, http_status
from elicitation.models import Passkey
from elicitation.queue import access, step_up
from elicitation.queue.errors import DomainError, StepUpRequired
from elicitation.reviewer.rate_budget import within_reviewer_rate
from elicitation.reviewer.signed_in import SignedInRequest

# A WebAuthn answer is a few hundred bytes; a registration with an attestation certificate chain a few KB.
BODY_LIMIT = 16 * 1024
ASSERTION_FIELD = "step_up_assertion"


def _json_body(request: HttpRequest) -> Any:
    if len(request.body) > BODY_LIMIT:
        raise ValueError({"body": f"must be at most {BODY_LIMIT} bytes"})
    try:
        return json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ValueError({"body": "must be JSON"}) from None


def _refused(exc: DomainError) -> JsonResponse:
    return JsonResponse(domain_error_body(exc), status=http_status(exc))


def posted_assertion(request: HttpRequest) -> dict[str, Any] | None:
    """The passkey assertion step-up.js put into the answer form, or None. Not JSON, too long or not an object:
    refused as a step-up failure (403 on the page, the form kept), never a 500."""
    raw = request.POST.get(ASSERTION_FIELD, "")
    if not raw:
        return None
    try:
        if len(raw) > BODY_LIMIT:
            raise ValueError(raw)
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(raw)
    except ValueError:
        raise StepUpRequired(
            "The passkey answer could not be read: approve again.", {"step_up": "not a WebAuthn assertion"}
        ) from None
    return data


@login_required
@within_reviewer_rate
@require_POST
def step_up_options(request: SignedInRequest, request_id: UUID) -> JsonResponse:
    """A fresh one-time challenge binding this request's id and digest, for navigator.credentials.get."""
    try:
        found = access.reviewable_request(request.user, request_id)
        return JsonResponse({"publicKey": step_up.authentication_options(found, request.user)})
    except DomainError as exc:
        return _refused(exc)


@login_required
@within_reviewer_rate
@require_POST
def registration_options(request: SignedInRequest) -> JsonResponse:
    """A fresh one-time challenge for navigator.credentials.create."""
    try:
        return JsonResponse({"publicKey": step_up.registration_options(request.user)})
    except DomainError as exc:
        return _refused(exc)


@login_required
@within_reviewer_rate
@require_POST
def register(request: SignedInRequest) -> JsonResponse:
    """`{"name": …, "credential": <navigator.credentials.create's answer as JSON>}`: verified, then kept."""
    try:
        data = _json_body(request)
    except ValueError as exc:
        return JsonResponse(error_body("invalid", "The body is not valid.", exc.args[0]), status=400)
    if not isinstance(data, dict) or not isinstance(data.get("credential"), dict):
        return JsonResponse(
            error_body(
                "invalid", "The body is not valid.", {"credential": "is required: the new credential"}
            ),
            status=400,
        )
    name = data.get("name") if isinstance(data.get("name"), str) else ""
    try:
        saved = step_up.register_passkey(request.user, data["credential"], str(name))
    except DomainError as exc:
        return _refused(exc)
    return JsonResponse({"id": saved.pk, "name": saved.name}, status=201)


@login_required
@within_reviewer_rate
@require_POST
def remove(request: SignedInRequest, passkey_id: int) -> HttpResponse:
    """Forget one of the reviewer's own passkeys (another reviewer's is never touched: nothing happens)."""
    removed, _ = Passkey.objects.filter(pk=passkey_id, user=request.user).delete()
    if removed:
        messages.success(request, "The passkey was removed: it no longer signs approvals here.")
    else:
        messages.error(request, "No such passkey of yours.")
    return redirect("preferences")
