"""The answer to a long-poll that a push has already settled, without a pass through Django.

A long-poll on a request waits in front of Django (delivery/long_poll.py). When the push that closed the request
ends the wait, Django's whole pass (a thread of its own, the middleware chain, authentication again, the view)
cost a busy process more than the wait itself: at 100 answers/s beside 5,000 idle sockets it saturated the
process, and the answer trailed the socket's frame by seconds (bench #3). The key was checked and the request's
owner confirmed when the wait began; what is left is what `RequestDetailView.get` does after that: count the call
against AGENT_RATE, read the request, render it. The middleware sends it with the headers Django gave that route.
"""

from uuid import UUID

from elicitation.api import serializers as s
from elicitation.api.parsers import SafeJSONRenderer
from elicitation.api.throttling import charge_agent
from elicitation.queue import access
from elicitation.queue.errors import NotFoundError


def settled_request_body(agent_id: int, request_id: UUID | str) -> bytes | None:
    """The JSON body `GET /api/v1/requests/<id>` answers the agent, or None when Django must answer instead
    (over its rate: 429 with Retry-After; the request is gone: 404)."""
    if not charge_agent(agent_id):
        return None
    try:
        request = access.owned_request(agent_id, request_id)
    except NotFoundError:
        return None
    return SafeJSONRenderer().render(s.RequestSerializer(request).data)
