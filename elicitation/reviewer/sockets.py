"""Reviewer pages' live updates: queue pages and request pages listen to the pushes of delivery/pushes.py."""

import asyncio
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser, User

from elicitation.delivery import pushes
from elicitation.delivery.socket_base import (
    CLOSE_SERVICE_RESTART,
    CLOSE_TRY_AGAIN_LATER,
    HardenedJsonConsumer,
)
from elicitation.queue import access
from elicitation.queue.errors import DomainError


def reviewer_page_group(user: User | AnonymousUser | None, route: dict[str, Any]) -> str | None:
    """The group a reviewer page may listen to, or None: unknown ids and other queues look the same."""
    try:
        if "slug" in route:
            return pushes.queue_group(access.reviewable_queue(user, route["slug"]).pk)
        if "request_id" in route:
            return pushes.request_group(access.reviewable_request(user, route["request_id"]).pk)
    except DomainError:
        return None
    return None


class ReviewerPageConsumer(HardenedJsonConsumer):
    """Live updates for a queue page (`ws/queues/<slug>/`) or a request page (`ws/requests/<id>/`).

    Session-authenticated (the route wraps it in AuthMiddlewareStack); relays what pushes.py broadcasts
    and accepts nothing from the browser but `ping`: every write goes through the reviewer API. Frames that are
    binary, not JSON, too deep or hold invalid text get an error frame (delivery/socket_base.py). With the
    channel layer away the socket is accepted and closed with 4013 (try again later); when the layer comes back
    open sockets are closed with 4012 (service restart). Either way the page reconnects with backoff and, having
    possibly missed pushes, reloads what it shows (static/reviewhub/reviewhub.js, `open(again)`).
    """

    group: str | None = None
    closing: "asyncio.Future[None] | None" = None

    async def connect(self) -> None:
        route = self.scope.get("url_route", {}).get("kwargs", {})
        group = await database_sync_to_async(reviewer_page_group)(self.scope.get("user"), route)
        if group is None:
            await self.close(code=4403)
            return
        self.group = group
        joined = await self.join_group(group)
        await self.accept()
        if not joined:
            await self.close(code=CLOSE_TRY_AGAIN_LATER)

    async def disconnect(self, code: int) -> None:
        await self.leave_groups()

    def layer_recovered(self) -> None:
        self.closing = asyncio.ensure_future(self.close(code=CLOSE_SERVICE_RESTART))

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def queue_update(self, message: dict[str, Any]) -> None:
        await self.send_json(message)

    async def request_update(self, message: dict[str, Any]) -> None:
        await self.send_json(message)

    async def request_draft(self, message: dict[str, Any]) -> None:
        await self.send_json(message)
