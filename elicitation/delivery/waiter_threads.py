"""ORM calls from the event loop. Waiters (long-polls, agent sockets, MCP tool waits) read the database through a
fixed handful of threads however many of them wait, so waiting costs threads per process, not per waiter; their
periodic rechecks are batched by the hub (waiters.py), so the threads serve one query per round, not per waiter."""

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from channels.db import DatabaseSyncToAsync

T = TypeVar("T")

WAITER_DB_THREADS = 4
waiter_pool = ThreadPoolExecutor(max_workers=WAITER_DB_THREADS, thread_name_prefix="reviewhub-waiter-db")


def database_call(func: Callable[..., T], executor: Any = waiter_pool) -> Callable[..., Awaitable[T]]:
    """`func` as a coroutine on `executor` (the shared waiter pool unless told otherwise); connections are closed
    or kept as CONN_MAX_AGE says, exactly as after a request."""
    return cast(
        "Callable[..., Awaitable[T]]", DatabaseSyncToAsync(func, thread_sensitive=False, executor=executor)
    )
