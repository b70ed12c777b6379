"""Reviewer pages' live updates: queue pages and request pages listen to the pushes of delivery/pushes.py."""

from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from elicitation.delivery import pushes
from elicitation.queue import access
from elicitation.queue.errors import DomainError


def reviewer_page_group(user: Any, route: dict[str, Any]) -> str | None:
    """The group a reviewer page may listen to, or None: unknown ids and other queues look the same."""
    try:
        if "slug" in route:
            return pushes.queue_group(access.reviewable_queue(user, route["slug"]).pk)
        if "request_id" in route:
            return pushes.request_group(access.reviewable_request(user, route["request_id"]).pk)
    except DomainError:
        return None
    return None


class ReviewerPageConsumer(AsyncJsonWebsocketConsumer):
    """Live updates for a queue page (`ws/queues/<slug>/`) or a request page (`ws/requests/<id>/`).

    Session-authenticated (the route wraps it in AuthMiddlewareStack); relays what pushes.py broadcasts
    and accepts nothing from the browser: every write goes through the reviewer API.
    """

    group: str | None = None

    async def connect(self) -> None:
        route = self.scope.get("url_route", {}).get("kwargs", {})
        group = await sync_to_async(reviewer_page_group)(self.scope.get("user"), route)
        if group is None:
            await self.close(code=4403)
            return
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def queue_update(self, message: dict[str, Any]) -> None:
        await self.send_json(message)

    async def request_update(self, message: dict[str, Any]) -> None:
        await self.send_json(message)

    async def request_draft(self, message: dict[str, Any]) -> None:
        await self.send_json(message)
