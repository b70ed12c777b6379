"""E-mail to reviewers: one message per request (per-arrival preference) or one digest of several.

Each carries a deep link to the request's page; the link holds no credential, so whoever opens it signs in and
is checked like anyone else. URL-mode requests (hosted secret flows included) are named by queue only: their
content stays in ReviewHub. Sent by Django's mail backend (SMTP in production; tests run a real SMTP server on
loopback).
"""

from collections.abc import Sequence
from datetime import UTC

from django.conf import settings
from django.core.mail import EmailMessage

from elicitation.delivery.slack import request_link
from elicitation.models import ElicitationRequest, Mode

EXCERPT = 300


def _summary(request: ElicitationRequest) -> list[str]:
    due = f"due {request.deadline.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    lines = [f"Queue: {request.queue.name} · priority {request.priority} · {due}"]
    if request.mode == Mode.URL:
        lines.append("This request's details are only shown in ReviewHub.")
    else:
        message = " ".join(request.message.split())
        lines.append(message if len(message) <= EXCERPT else message[: EXCERPT - 1] + "…")
    lines.append(f"Open it (you will be asked to sign in): {request_link(request)}")
    return lines


def arrival_message(request: ElicitationRequest, to: str) -> EmailMessage:
    subject = f"[ReviewHub] {request.queue.name}: a request from {request.agent.name} needs you"
    body = "\n".join(
        [*_summary(request), "", "You get one e-mail per request; change it in your preferences."]
    )
    return EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=[to])


def digest_message(requests: Sequence[ElicitationRequest], to: str) -> EmailMessage:
    subject = f"[ReviewHub] {len(requests)} request(s) waiting for you"
    parts: list[str] = []
    for request in requests:
        parts += [*_summary(request), ""]
    return EmailMessage(
        subject=subject,
        body="\n".join(parts).rstrip() + "\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[to],
    )
