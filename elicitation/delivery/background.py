"""The embedded deployment's notice senders: a few threads per process that run reach's tasks after commit, so an
agent's create never waits on Slack or an SMTP server.

With a broker (REDIS_URL) reach's tasks are queued and a Celery worker sends them; this pool is not used. Without
one, Celery runs tasks eagerly, in the caller's thread: inside the create's `on_commit`, a Slack that took 2 s made
the create take 2.08 s (10 s when it hung). `reach_tasks.enqueue` hands eager tasks to this pool instead.

- A few threads, each mostly waiting on a peer: an arrival told by Slack (200 ms) and e-mail (300 ms) holds them for
  half a second, so 8 keep up with 10 arrivals a second, channels sent concurrently (BENCHMARKS.md, reach).
- A bounded backlog: past `BACKLOG` unfinished jobs a new one is dropped and logged, as a broker outage would be;
  a notice already recorded is sent later by the retry sweep (notices.py leases each one from its recording).
- Each job closes its database connections when it ends, as Django does after a request: a pooled thread keeps no
  connection (or SQLite lock) between jobs.
"""

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import connection, connections

logger = logging.getLogger(__name__)

THREADS = 8
BACKLOG = 1000

_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="reviewhub-notices")
_room = threading.BoundedSemaphore(BACKLOG)
_unfinished = 0
_unfinished_lock = threading.Lock()


def submit(job: Callable[..., Any], *args: Any) -> bool:
    """Run `job(*args)` on the pool. Returns False when the backlog is full and the job was dropped.

    A caller still inside a transaction runs the job here and now: the pool's threads use connections of their own,
    which cannot see rows the caller has not committed. Reach queues its jobs from `on_commit` callbacks, which
    run after the commit; the one caller inside a transaction is a test's wrapping transaction."""
    if connection.in_atomic_block:
        _call_logging_failure(job, args)
        return True
    if not _room.acquire(blocking=False):
        logger.warning(
            "notice backlog full (%d jobs); dropped %s%r", BACKLOG, getattr(job, "__name__", job), args
        )
        return False
    _count(+1)
    try:
        _pool.submit(_run, job, args)
    except RuntimeError:  # the interpreter is shutting down: nothing runs any more
        _finished()
        return False
    return True


def unfinished() -> int:
    """Jobs submitted and not finished yet (queued or running)."""
    return _unfinished


def _run(job: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        _call_logging_failure(job, args)
    finally:
        connections.close_all()
        _finished()


def _call_logging_failure(job: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        job(*args)
    except Exception:
        logger.exception("background notice job %s%r failed", getattr(job, "__name__", job), args)


def _finished() -> None:
    _count(-1)
    _room.release()


def _count(change: int) -> None:
    global _unfinished
    with _unfinished_lock:
        _unfinished += change
