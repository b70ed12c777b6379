"""DRF authentication for agents (`rh_…`) and reviewer scripts (`rhr_…`), over the one key parser in queue/keys.py."""

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from elicitation.models import Agent
from elicitation.queue.keys import agent_for_key, bearer_token, is_agent_key, reviewer_token_for_key


class AgentKeyAuthentication(authentication.BaseAuthentication):
    """An agent's key; the body is the view's to read, after authentication, so a bad key is a 401 first."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = bearer_token(request.headers)
        if token is None or not is_agent_key(token):
            return None
        agent = agent_for_key(token)
        if agent is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked agent key.")
        return (AgentUser(agent), agent)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="reviewhub"'


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


class ReviewerRequest(Request):
    """A `Request` that `IsReviewer` has let through: `user` is a reviewer's account. For the type checker only."""

    user: User


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
