"""Who is calling a tool. Two ways in, both through the SDK's own bearer-token stack, so the tools see the caller
as the request's access token:

- an agent key (`Authorization: Bearer rh_…`), for scripts and hosts configured with a static header;
- an OAuth 2.1 access token (elicitation/mcp/oauth.py): a remote host discovers the authorization server from the
  401's `WWW-Authenticate: Bearer resource_metadata=…`, registers, sends a person through ReviewHub's consent page
  and acts as the agent and queues that person chose. Tokens bound to another resource, expired or revoked are
  refused with the same 401.
"""

from django.conf import settings
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError

from elicitation.mcp.oauth import principal_for_token
from elicitation.mcp.service_calls import database_call
from elicitation.models import Agent, ElicitationRequest
from elicitation.queue.errors import DomainError, InvalidInput
from elicitation.queue.keys import agent_for_key, is_agent_key

QUEUE_SCOPE_PREFIX = "queue:"
OAUTH_SCOPE = "oauth"


class AgentKeyVerifier:
    """The SDK's `TokenVerifier` over ReviewHub agent keys and OAuth access tokens. Checked on every HTTP request,
    so revocation (of a key, an agent or a consent) is immediate. `client_id` carries the agent's id: the tools,
    and the SDK's request-state principal binding, read it from the request's access token. An OAuth token's
    scopes name its queues (`queue:<slug>`)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return await database_call(self.resolve)(token)  # type: ignore[no-any-return]

    def resolve(self, token: str) -> AccessToken | None:
        """The token's access, or None; every read it needs in one trip off the event loop."""
        if is_agent_key(token):
            return key_access(token, agent_for_key(token))
        principal = principal_for_token(token)
        if principal is None:
            return None
        scopes = [
            *principal.capabilities,
            OAUTH_SCOPE,
            *(QUEUE_SCOPE_PREFIX + q for q in sorted(principal.queues)),
        ]
        return AccessToken(
            token=token,
            client_id=str(principal.agent_id),
            scopes=scopes,
            expires_at=principal.expires_at,
            resource=settings.MCP_RESOURCE_URL,
            subject=f"grant:{principal.grant_id}",
        )


def key_access(key: str, agent: Agent | None) -> AccessToken | None:
    """The access an agent key gives: the agent's, or none."""
    if agent is None:
        return None
    return AccessToken(token=key, client_id=str(agent.pk), scopes=list(agent.scopes or []))


class Caller:
    """The agent behind this call and, for an OAuth token, the queues its consent covers (None: all the agent's)."""

    def __init__(self, agent_id: int, queues: frozenset[str] | None) -> None:
        self.agent_id = agent_id
        self.queues = queues

    def check_queue(self, slug: str) -> None:
        if self.queues is not None and slug not in self.queues:
            # The REST API's words for a queue the key may not post to.
            raise InvalidInput("Unknown queue.", {"queue": "unknown queue, or not one this key may post to"})

    def sees(self, request: ElicitationRequest) -> bool:
        return self.queues is None or request.queue.slug in self.queues


def current_caller() -> Caller:
    token = get_access_token()
    if token is None:  # RequireAuthMiddleware answers 401 before any tool runs; this is a guard, not a path
        raise ToolError("Not authenticated.")
    return caller_of(token)


def caller_of(token: AccessToken) -> Caller:
    queues: frozenset[str] | None = None
    if OAUTH_SCOPE in token.scopes:
        queues = frozenset(
            x[len(QUEUE_SCOPE_PREFIX) :] for x in token.scopes if x.startswith(QUEUE_SCOPE_PREFIX)
        )
    return Caller(int(token.client_id), queues)


def load_agent(agent_id: int) -> Agent:
    agent = Agent.objects.filter(pk=agent_id, revoked_at__isnull=True).first()
    if agent is None:
        raise DomainError("Invalid or revoked agent key.")
    return agent
