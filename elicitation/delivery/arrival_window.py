"""A process's arrivals gathered for a moment, then handed on together: one `notify_arrivals` task for a window
of arrivals instead of one task per arrival (reach_tasks.notify_soon).

At 50 arrivals a second, a task per arrival cost the notices worker a broker receive and publish, a read of the
request, routing's reads and the inserts for each one; a task per window pays most of that once for all of its
arrivals. The first arrival after a quiet moment leaves at once, so at low rates nothing waits; under load a
window leaves at most every `seconds` (or as soon as it holds `limit` arrivals).

What a window holds lives in the process's memory until it leaves, at most `seconds`: a process killed in that
moment loses those arrivals' notices, as a broker outage at publish time does. `flush` hands them on at once;
the process calls it at exit and at the end of each Celery task (reach_tasks)."""

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Arrival = list[Any]  # [request id, tier], as a Celery task's JSON argument carries it


class ArrivalWindow:
    def __init__(self, seconds: float, limit: int, hand_on: Callable[[list[Arrival]], None]) -> None:
        self.seconds = seconds
        self.limit = limit
        self._hand_on = hand_on
        self._start_afresh()
        os.register_at_fork(after_in_child=self._start_afresh)

    def _start_afresh(self) -> None:
        # Also in a forked child (a prefork worker): the parent's thread is not there, and its lock may be held.
        self._changed = threading.Condition()
        self._held: list[Arrival] = []
        self._left_at = float("-inf")
        self._thread: threading.Thread | None = None

    def add(self, request_id: str, tier: int) -> None:
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="reviewhub-arrivals", daemon=True)
                self._thread.start()
                atexit.register(self.flush)
            self._held.append([request_id, tier])
            if len(self._held) == 1 or len(self._held) >= self.limit:
                self._changed.notify()

    def flush(self) -> None:
        """Hand on what the window holds now."""
        with self._changed:
            held = self._take()
        self._hand_on_in_parts(held)

    def _take(self) -> list[Arrival]:
        held, self._held = self._held, []
        if held:
            self._left_at = time.monotonic()
        return held

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._held:
                    self._changed.wait()
                while len(self._held) < self.limit:
                    remaining = self._left_at + self.seconds - time.monotonic()
                    if remaining <= 0:
                        break
                    self._changed.wait(remaining)
                held = self._take()
            self._hand_on_in_parts(held)

    def _hand_on_in_parts(self, held: list[Arrival]) -> None:
        for start in range(0, len(held), self.limit):
            part = held[start : start + self.limit]
            try:
                self._hand_on(part)
            except Exception:  # the window's thread goes on for the next arrivals
                logger.exception("could not hand on %d arrivals", len(part))
