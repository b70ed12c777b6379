"""`/healthz`: is the database answering, and does a message make it through the channel layer?"""

import asyncio
import time

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse


def database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return bool(cursor.fetchone() == (1,))
    except Exception:
        return False


async def channel_layer_ok() -> bool:
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "health.ping"})
        message = await asyncio.wait_for(layer.receive(channel), timeout=2)
        return bool(message.get("type") == "health.ping")
    except Exception:
        return False


async def healthz(request: HttpRequest) -> JsonResponse:
    started = time.monotonic()
    checks = {"database": await sync_to_async(database_ok)(), "channel_layer": await channel_layer_ok()}
    healthy = all(checks.values())
    body = {
        "status": "ok" if healthy else "unavailable",
        **checks,
        "ms": round((time.monotonic() - started) * 1000, 1),
    }
    response = JsonResponse(body, status=200 if healthy else 503)
    if not healthy:
        response["Retry-After"] = "5"
    return response
