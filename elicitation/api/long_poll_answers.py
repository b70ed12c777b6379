"""The answer to a long-poll on a request once its wait is over, without a pass through Django.

A long-poll on a request waits in front of Django (delivery/long_poll.py). Once the wait ends (the closing push,
a recheck, or the time asked for), Django's whole pass (a thread of its own, the middleware chain,
authentication again, the view) cost a busy process more than the wait itself: at 100 answers/s beside 5,000
idle sockets it saturated the process and the answer trailed the socket's frame by seconds, and 9,850 long-polls
timing out together exhausted the database pool (bench #3 and #10). The key's HMAC was checked when the wait
began; what is left is what `RequestDetailView.get` does after that: count the call against AGENT_RATE, read the
request, render it. The middleware sends it with the headers Django gave the route.
"""

from uuid import UUID

from elicitation.api import serializers as s
from elicitation.api.parsers import SafeJSONRenderer
from elicitation.api.throttling import charge_agent
from elicitation.queue import access
from elicitation.queue.errors import NotFoundError


def request_body_after_wait(agent_id: int, key_prefix: str, request_id: UUID | str) -> bytes | None:
    """The JSON body `GET /api/v1/requests/<id>` answers the agent now, or None when Django must answer instead:
    the key was revoked or rotated during the wait (401), the agent is over its rate (429 with Retry-After), or the
    request is gone (404). The key is re-checked on the row read with the request, at no extra query."""
    if not charge_agent(agent_id):
        return None
    try:
        request = access.owned_request(agent_id, request_id)
    except NotFoundError:
        return None
    if not request.agent.is_active or request.agent.key_prefix != key_prefix:
        return None
    return SafeJSONRenderer().render(s.RequestSerializer(request).data)
