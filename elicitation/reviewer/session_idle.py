"""Sessions end after SESSION_IDLE_TIMEOUT_SECONDS without a request (default 8 h), besides their absolute age
(SESSION_COOKIE_AGE): a browser left signed in on a shared machine does not stay a reviewer for two weeks.

The last-seen time is written at most once a minute, so an active page does not write its session on every
request. Requests without a session cookie (agents, scripts with tokens) are not touched.
"""

import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

LAST_SEEN = "_reviewhub_last_seen"
WRITE_EVERY_SECONDS = 60


def end_idle_session(request: HttpRequest) -> None:
    if settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return
    session: Any = request.session
    now = int(time.time())
    last = session.get(LAST_SEEN)
    if isinstance(last, int) and now - last > settings.SESSION_IDLE_TIMEOUT_SECONDS:
        logout(request)  # flushes the session: the next page asks to sign in again
        return
    if not isinstance(last, int) or now - last >= WRITE_EVERY_SECONDS:
        session[LAST_SEEN] = now


@sync_and_async_middleware
def session_idle_timeout(get_response: Callable[[HttpRequest], Any]) -> Any:
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            if settings.SESSION_COOKIE_NAME in request.COOKIES:
                await sync_to_async(end_idle_session)(request)
            response: Awaitable[HttpResponse] = get_response(request)
            return await response

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponse:
        end_idle_session(request)
        response: HttpResponse = get_response(request)
        return response

    return sync_middleware
