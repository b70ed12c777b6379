from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from elicitation.delivery import agent_socket
from elicitation.reviewer import sockets

websocket_urlpatterns = [
    # Agents authenticate with a key header or a single-use ticket, never a cookie, so a cross-site page cannot
    # ride on them; agent libraries send no Origin header at all, which the origin check would refuse.
    path("ws/agent/", agent_socket.AgentWaitConsumer.as_asgi()),
    # Reviewer pages authenticate with the Django session cookie.
    path(
        "ws/queues/<slug:slug>/",
        AllowedHostsOriginValidator(AuthMiddlewareStack(sockets.ReviewerPageConsumer.as_asgi())),
    ),
    path(
        "ws/requests/<uuid:request_id>/",
        AllowedHostsOriginValidator(AuthMiddlewareStack(sockets.ReviewerPageConsumer.as_asgi())),
    ),
]
