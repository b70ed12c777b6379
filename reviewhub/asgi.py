"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import importlib.util
import os
from collections.abc import AsyncIterator, Iterator
from typing import cast

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse


class OneHopASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain run in sync mode: the chain and the view in one thread hop.

    The stock handler runs the chain in async mode, where every MiddlewareMixin hook (Django's own included)
    hops to a thread and back, ~14 hops a request: a third of the server's CPU per API call (BENCHMARKS.md).
    Django's `handle` still adds its own two, `request_started`'s receivers before and `response.close()` after.
    The views are sync and long-polls wait in LongPollMiddleware in front of Django, so nothing needs the
    async chain; async views (healthz) still run on the event loop, reached through async_to_sync.
    Django has no public switch for this, hence the override of `load_middleware` (README, dependency notes).
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response_read, thread_sensitive=True)(request)

    def get_response_read(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if isinstance(response, StreamingHttpResponse) and not response.is_async:
            # WhiteNoise's file responses iterate synchronously, and Django's ASGI handler would read them whole in
            # a second thread hop (with a warning per file). Read them in this hop instead; static files are small.
            chunks = cast(Iterator[bytes], response.streaming_content)
            response.streaming_content = replay(list(chunks))
        return response


async def replay(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
django.setup(set_prefix=False)  # as get_asgi_application() does, before the routing below imports models
django_http: ASGIHandler = OneHopASGIHandler()

# Static files are served by WhiteNoise inside Django's middleware chain (settings.SERVE_STATIC), so they carry
# the same security headers as pages.
from elicitation.delivery.long_poll import LongPollMiddleware  # noqa: E402

# Long-polls wait on the event loop in front of Django, so a waiting agent holds no thread (see long_poll.py); Django
# then answers them as any GET.
django_http = LongPollMiddleware(django_http)  # type: ignore[assignment]

if importlib.util.find_spec("mcp") is not None:  # the optional `reviewhub[mcp]` extra: MCP server at /mcp/
    from elicitation.mcp.gateway.endpoint import with_mcp_gateway
    from elicitation.mcp.server import with_mcp_endpoint

    django_http = with_mcp_gateway(with_mcp_endpoint(django_http))  # and upstreams at /mcp/gateway/<name>/

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from elicitation.delivery.pushes import with_push_sender  # noqa: E402
from elicitation.ops.sweeper import with_periodic_sweeps  # noqa: E402
from reviewhub.gc_tuning import tune_for_latency  # noqa: E402
from reviewhub.routing import websocket_urlpatterns  # noqa: E402

# The embedded deployment's deadline/lease/notification sweeps start with the first ASGI event (see sweeper.py);
# pushes leave from the server's event loop without holding the view's thread (events.PushSender).
application = with_push_sender(
    with_periodic_sweeps(
        ProtocolTypeRouter(
            {
                "http": django_http,
                # Origins are checked per route (elicitation/routing.py): cookie-authenticated reviewer pages.
                "websocket": URLRouter(websocket_urlpatterns),
            }
        )
    )
)

# Last, so that everything loaded above is frozen out of the collector's walks (gc_tuning.py).
tune_for_latency()
