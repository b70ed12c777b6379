"""A process of claim's race (#2): spawned, so it imports nothing Django-shaped until it has set Django up."""

import json
import threading
import time
from pathlib import Path


def race_worker(queue_id: int, user_ids: list[int], out_path: str, time_limit: float) -> None:
    """One process of the race: a thread per claimer, each claiming until the queue is empty."""
    # Pushes go to an in-memory layer nobody listens on: the race is about the database, and a Redis round trip
    # per push from threads without an event loop would only slow the claimers down.
    from bench import harness

    harness.setup_django()
    from django.conf import settings

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from elicitation.delivery import pushes

    # Pushes leave after COMMIT and cannot change who won a claim; from threads without an event loop each
    # would start a loop of its own (async_to_sync), which would only slow the race down.
    pushes.send_to_groups = lambda batch: None
    from django.contrib.auth import get_user_model
    from django.db import connection

    from elicitation.models import Queue
    from elicitation.queue import transitions
    from elicitation.queue.errors import InvalidTransition

    queue = Queue.objects.get(pk=queue_id)
    claimed: dict[str, list[str]] = {str(user): [] for user in user_ids}
    # Why each claimer stopped: "empty" (claim_next found nothing) or "time" (the race's time limit).
    stopped: dict[str, str] = {str(user): "time" for user in user_ids}
    deadline = time.monotonic() + time_limit

    def claimer(user_id: int) -> None:
        user = get_user_model().objects.get(pk=user_id)
        mine = claimed[str(user_id)]
        try:
            while time.monotonic() < deadline:
                try:
                    request = transitions.claim_next(queue, user=user)
                except InvalidTransition:
                    continue
                if request is None:
                    stopped[str(user_id)] = "empty"
                    return
                mine.append(str(request.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(user,)) for user in user_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    Path(out_path).write_text(json.dumps({"claimed": claimed, "stopped": stopped}))
