"""The answer to a long-poll on a request once its wait is over, without a pass through Django.

A long-poll on a request waits in front of Django (delivery/long_poll.py). Once the wait ends (the closing push,
a recheck, or the time asked for), Django's whole pass (a thread of its own, the middleware chain,
authentication again, the view) cost a busy process more than the wait itself: at 100 answers/s beside 5,000
idle sockets it saturated the process and the answer trailed the socket's frame by seconds, and 9,850 long-polls
timing out together exhausted the database pool (bench #3 and #10). The key's HMAC was checked when the wait
began (or trusted, as one the database confirmed lately: waiters.KEY_TRUST_SECONDS); what is left is what
`RequestDetailView.get` does after that: count the call against AGENT_RATE, read the request, render it. Waits
that ran out together are answered together, with one query. The middleware sends the bodies with the headers
Django gave the route.

A request closed by a transition is rendered once more where it closed (`request_body`, wired into
delivery/pushes.py by elicitation/apps.py): its agent.event push carries the body, and a long-poll it wakes answers
with it, counting the call (`charge_agent_call`), with no read at all.
"""

from elicitation.api import serializers as s
from elicitation.api.parsers import SafeJSONRenderer
from elicitation.api.throttling import charge_agent
from elicitation.models import ElicitationRequest
from elicitation.queue import access


def request_body(request: ElicitationRequest) -> bytes:
    """The JSON body `GET /api/v1/requests/<id>` answers the request's agent with (the row read with its queue)."""
    return SafeJSONRenderer().render(s.RequestSerializer(request).data)


def request_bodies_after_wait(waits: list[tuple[int, str, str]]) -> list[bytes | None]:
    """For each (agent id, key prefix, request id), the JSON body `GET /api/v1/requests/<id>` answers the agent
    now, or None when Django must answer instead: the key was revoked or rotated during the wait (401), the request
    is gone (404), or the agent is over its rate (429 with Retry-After). One query for all of them; the key is
    re-checked on the row read with each request, and each answer is counted against the agent's rate."""
    found = access.owned_requests([(agent_id, request_id) for agent_id, _, request_id in waits])
    bodies: list[bytes | None] = []
    for agent_id, key_prefix, request_id in waits:
        request = found.get((agent_id, request_id))
        live = request is not None and request.agent.is_active and request.agent.key_prefix == key_prefix
        # Charged only when answered here: otherwise Django's pass counts the call.
        answered = live and charge_agent(agent_id)
        bodies.append(request_body(request) if answered and request is not None else None)
    return bodies
