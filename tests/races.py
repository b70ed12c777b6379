"""Both sides of a race at once: each in a thread of its own, with its own database connections, released together."""

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections


def at_once(*actions: Callable[[], Any], timeout: float = 60) -> list[Any]:
    """Run each action in its own thread, all released at the same moment; their results, in order. The first
    exception any of them raised is raised here once all have ended."""
    start = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)
    errors: list[BaseException] = []

    def run(index: int, action: Callable[[], Any]) -> None:
        try:
            start.wait(timeout=10)
            results[index] = action()
        except BaseException as exc:  # raised below, in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if errors:
        raise errors[0]
    return results
