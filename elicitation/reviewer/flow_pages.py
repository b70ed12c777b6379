"""The hosted flow page: where a reviewer types the secret an MCP server asked for.

The URL is not a credential: the reviewer must be logged in and a reviewer of the flow's request
(hosted_flows.flow_for_reviewer, checked on every GET and POST); only the claim holder sees the form. Responses are never cached, send no Referer, cannot be framed and run no script.
POST data and this module's locals are hidden from error reports; submitted sensitive values are redacted from
any log record written while they are handled.
"""

from typing import Any
from uuid import UUID

from csp.constants import NONE, SELF
from csp.decorators import csp
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import redirect, render
from django.utils.decorators import decorator_from_middleware
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_http_methods

from elicitation.flows import hosted_flows, redaction
from elicitation.models import Action, FlowStatus, HostedFlow
from elicitation.queue import audit, schemas
from elicitation.queue.errors import DomainError, InvalidInput, NotFoundError
from elicitation.reviewer import forms
from elicitation.reviewer.errors import error_page
from elicitation.reviewer.signed_in import SignedInRequest, is_signed_in

FORM_PREFIX = "answer"  # keeps question ids (agent-chosen names) clear of csrfmiddlewaretoken and "action"
# Stricter than every other page's (settings.CONTENT_SECURITY_POLICY): no script, no connections, nothing framed.
FLOW_PAGE_CSP = {
    "default-src": [NONE],
    "style-src": [SELF],
    "img-src": [SELF],
    "form-action": [SELF],
    "frame-ancestors": [NONE],
    "base-uri": [NONE],
}


class FlowCsrfMiddleware(CsrfViewMiddleware):
    """Django's CSRF check, token and all, with one difference forced by `Referrer-Policy: no-referrer`: browsers
    then send `Origin: null` with the page's own form POST. A null origin is accepted only when the browser also
    says the POST is same-origin (`Sec-Fetch-Site`, sent by current browsers) or says nothing; the CSRF token is
    still required either way, and any real origin must still match."""

    # Overrides a private hook of CsrfViewMiddleware (stable since Django 4.0); Django has no public one for a null
    # origin (README, dependency notes). The flow page tests pin it.
    def _origin_verified(self, request: HttpRequest) -> bool:
        if request.META.get("HTTP_ORIGIN") == "null":
            return bool(request.META.get("HTTP_SEC_FETCH_SITE", "same-origin") == "same-origin")
        return bool(super()._origin_verified(request))  # type: ignore[misc]  # not in django-stubs


flow_csrf_protect = decorator_from_middleware(FlowCsrfMiddleware)


def with_flow_headers(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response


FLOW_TITLES = {"not_found": "No such flow", "forbidden": "Not your flow", "gone": "This flow is closed"}


def _error_response(request: HttpRequest, exc: DomainError) -> HttpResponse:
    detail = "This link does not lead to a flow." if exc.code == "not_found" else None
    if detail is not None:
        exc = NotFoundError(detail)
    return error_page(request, exc, template="flows/closed.html", title=FLOW_TITLES.get(exc.code))


def sensitive_posted_values(request: HttpRequest, questions: list[schemas.Question]) -> list[str]:
    return [
        request.POST.get(f"{FORM_PREFIX}-{question.id}", "") for question in questions if question.sensitive
    ]


@csp(FLOW_PAGE_CSP)
@csrf_exempt  # from the global middleware only: flow_csrf_protect below does the full check
@sensitive_post_parameters()
@sensitive_variables()
@flow_csrf_protect
@require_http_methods(["GET", "POST"])
def flow_page(request: HttpRequest, flow_id: UUID) -> HttpResponse:
    if not is_signed_in(request):
        return with_flow_headers(redirect_to_login(request.get_full_path()))
    try:
        response = _flow_page(request, flow_id)
    except DomainError as exc:
        response = _error_response(request, exc)
    return with_flow_headers(response)


@sensitive_variables()
def _flow_page(request: SignedInRequest, flow_id: UUID) -> HttpResponse:
    if request.method == "POST":
        hosted_flows.settle_flow(
            hosted_flows.load_flow(flow_id).pk
        )  # a write may settle what reads only show
    view = hosted_flows.flow_for_reviewer(flow_id, request.user)
    flow = view.flow
    if view.status != FlowStatus.OPEN:
        return render(request, "flows/done.html", _context(flow, None))
    questions = schemas.questions_from_json(flow.questions)
    if request.method != "POST":
        # Looking never claims; the page offers the claim, and only the holder gets the form.
        audit.record_view(flow.request, user=request.user)
        form = forms.build_answer_form(questions, prefix=FORM_PREFIX) if view.holds_claim else None
        return render(request, "flows/flow.html", _context(flow, form))
    if request.POST.get("action") == "claim":
        hosted_flows.claim_flow(flow.pk, request.user)
        return _see_other(request.path)
    if not view.holds_claim:
        # An answer posted by a reviewer who may claim (say, after the lease lapsed) claims first, as the
        # request page does: the guarded transitions still refuse anyone else's live claim.
        flow = hosted_flows.claim_flow(flow.pk, request.user)
    secrets = sensitive_posted_values(request, questions)
    redaction.attach_to_request(request, secrets)
    with redaction.secrets_in_flight(secrets):
        action = request.POST.get("action", Action.ACCEPT)
        if action in (Action.DECLINE, Action.CANCEL):
            hosted_flows.decline_hosted_flow(flow.pk, user=request.user, action=action)
            return render(request, "flows/closed.html", {"title": "Declined", "detail": "Nothing was sent."})
        form = forms.build_answer_form(questions, data=request.POST, prefix=FORM_PREFIX)
        if form.is_valid():
            try:
                hosted_flows.complete_hosted_flow(
                    flow.pk, user=request.user, content=forms.form_content(form)
                )
            except InvalidInput as exc:
                forms.apply_answer_errors(form, exc.fields)
            else:
                # Post/redirect/get: a reload must not offer to send the secret again.
                return _see_other(request.path)
        return render(request, "flows/flow.html", _context(flow, form), status=400)


def _see_other(path: str) -> HttpResponse:
    response = redirect(path)
    response.status_code = 303
    return response


def _context(flow: HostedFlow, form: Any) -> dict[str, Any]:
    request = flow.request
    return {
        "flow": flow,
        "request_row": request,
        "agent_name": request.agent.name,
        "queue": request.queue,
        "form": form,
        "has_sensitive": any(q.get("sensitive") for q in flow.questions),
    }
