"""The process's notice senders: threads that send notices, and, in the embedded deployment, run reach's tasks
after commit, so an agent's create never waits on Slack or an SMTP server.

- Lanes. Each channel has its own threads (`SENDERS_PER_CHANNEL`, made as needed), which `notify_arrivals` hands
  each notice it recorded to, in every deployment: a Slack that hangs holds Slack's threads, never the e-mails'.
  The `tasks` lane (`TASK_THREADS`) runs eager Celery tasks: without a broker (no REDIS_URL) Celery runs tasks in
  the caller's thread, inside the create's `on_commit` (a Slack that took 2 s made the create take 2.08 s, 10 s
  when it hung); `reach_tasks.enqueue` hands them here instead.
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

TASKS = "tasks"
# Eager tasks mostly record and hand notices to the channels' lanes: a few threads keep up (BENCHMARKS.md, reach).
TASK_THREADS = 8
# At 50 arrivals/s, Slack answering in 200 ms and SMTP in 300 ms, 10 and 15 notices are in flight on average;
# each takes longer on a loaded machine, and bursts come on top: twice as many threads, which mostly wait.
SENDERS_PER_CHANNEL = 64
BACKLOG = 1000

_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()
_room = threading.BoundedSemaphore(BACKLOG)
_unfinished = 0
_unfinished_lock = threading.Lock()


def submit(job: Callable[..., Any], *args: Any, lane: str = TASKS) -> bool:
    """Run `job(*args)` on the lane's threads (a channel's, or `TASKS`). Returns False when the backlog is full and
    the job was dropped.

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
        _pool(lane).submit(_run, job, args)
    except RuntimeError:  # the interpreter is shutting down: nothing runs any more
        _finished()
        return False
    return True


def _pool(lane: str) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(lane)
        if pool is None:
            threads, prefix = (TASK_THREADS, "") if lane == TASKS else (SENDERS_PER_CHANNEL, f"-{lane}")
            pool = _pools[lane] = ThreadPoolExecutor(threads, thread_name_prefix=f"reviewhub-notices{prefix}")
        return pool


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
