"""DRF authentication for agents (`rh_…`) and reviewer scripts (`rhr_…`), over the one key parser in queue/keys.py."""

import json
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from elicitation.models import Agent
from elicitation.queue.keys import (
    agent_and_queue_for_key,
    agent_for_key,
    bearer_token,
    reviewer_token_for_key,
)


class AgentKeyAuthentication(authentication.BaseAuthentication):
    """An agent's key. On a view with `queue_read_with_key` (the create), a POST whose JSON body names a queue
    reads that queue in the key's own statement (keys.agent_and_queue_for_key) and leaves it as
    `request.queue_read`; a body it cannot read that way is left to the parser, which answers for it after
    authentication, as on any other view."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = bearer_token(request.headers)
        if token is None or not token.startswith("rh_"):
            return None
        view = (request.parser_context or {}).get("view")
        slug = json_body_queue(request) if getattr(view, "queue_read_with_key", False) else None
        if slug is None:
            agent = agent_for_key(token)
        else:
            agent, queue = agent_and_queue_for_key(token, slug)
            request.queue_read = (slug, queue)  # type: ignore[attr-defined]
        if agent is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked agent key.")
        return (AgentUser(agent), agent)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="reviewhub"'


# What a queue slug can be (Queue.slug is a SlugField of 64); anything else is not read early.
SLUG = re.compile(r"[-a-zA-Z0-9_]{1,64}")


def json_body_queue(request: Request) -> str | None:
    """The queue slug a POST's JSON body names, or None."""
    if request.method != "POST" or not (request.content_type or "").startswith("application/json"):
        return None
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= settings.MAX_BODY_BYTES:
        return None
    try:
        value = json.loads(request.body)
    except (ValueError, RecursionError, RequestDataTooBig):
        return None
    slug = value.get("queue") if isinstance(value, dict) else None
    return slug if isinstance(slug, str) and SLUG.fullmatch(slug) else None


class AgentUser:
    """Stands in for request.user on agent calls, so nothing mistakes an agent for a reviewer."""

    is_authenticated = True
    is_staff = False
    is_anonymous = False

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.pk = None

    def __str__(self) -> str:
        return f"agent:{self.agent.name}"


class ReviewerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = bearer_token(request.headers)
        if token is None or not token.startswith("rhr_"):
            return None
        row = reviewer_token_for_key(token)
        if row is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked reviewer token.")
        return (row.user, row)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="reviewhub"'


class SessionAuthentication(authentication.SessionAuthentication):
    """Session auth that still answers 401 (not 403) when nobody is logged in."""

    def authenticate_header(self, request: Request) -> str:
        return 'Session realm="reviewhub"'


class IsAgent(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Agent)


class IsReviewer(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user is not None and not isinstance(user, AgentUser) and user.is_authenticated)


# OpenAPI security schemes for the classes above, so /api/schema/ says how each operation authenticates.
class AgentKeyScheme(OpenApiAuthenticationExtension):
    target_class = AgentKeyAuthentication
    name = "agentKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Agent key (`rh_…`), shown once at creation.",
        }


class ReviewerTokenScheme(OpenApiAuthenticationExtension):
    target_class = ReviewerTokenAuthentication
    name = "reviewerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "Reviewer script token (`rhr_…`)."}


class ReviewerSessionScheme(OpenApiAuthenticationExtension):
    target_class = SessionAuthentication
    name = "reviewerSession"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "apiKey", "in": "cookie", "name": "sessionid", "description": "A signed-in reviewer."}
