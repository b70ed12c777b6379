"""One Redis connection pool per URL per process, for Django's Redis cache and the few direct redis-py calls; and
for callers on an event loop, one asyncio client per URL per loop.

Django builds a cache object per request thread (`caches` is context-local), and each object its own
connection pool, so under ASGI, where every request runs in a new thread, every request opened a new Redis
connection (redis-py also reads package metadata for each new connection). The rate limits read the cache on
every API call: that was ~2 ms of server CPU per request (BENCHMARKS.md). Pools are thread-safe, and redis-py
resets a pool inherited across fork.
"""

import asyncio
import threading
import weakref
from typing import Any

import redis
import redis.asyncio


class SharedConnectionPool(redis.ConnectionPool):
    _registry: dict[tuple[str, str], "SharedConnectionPool"] = {}
    _registry_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "SharedConnectionPool":
        key = (url, repr(sorted(kwargs.items())))
        with cls._registry_lock:
            pool = cls._registry.get(key)
            if pool is None:
                pool = cls._registry[key] = super().from_url(url, **kwargs)
            return pool


_clients: dict[tuple[str, str], redis.Redis] = {}


def shared_client(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client on the process's shared pool for `url`, for what Django's cache API cannot say in one
    round trip (the rate-limit counter). Clients are thread-safe; one is kept per URL and options."""
    key = (url, repr(sorted(kwargs.items())))
    client = _clients.get(key)
    if client is None:
        client = _clients.setdefault(
            key, redis.Redis(connection_pool=SharedConnectionPool.from_url(url, **kwargs))
        )
    return client


# Enough for the commands one event loop has in flight at once; more callers queue for a connection.
LOOP_POOL_CONNECTIONS = 32

LoopClients = dict[tuple[str, str], redis.asyncio.Redis]
_loop_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopClients]" = (
    weakref.WeakKeyDictionary()
)


def loop_client(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    """An asyncio redis-py client for `url` on the running event loop. Its connections belong to the loop that
    opened them, so each loop has its own (a server has one; a test may run several, one after another).

    A burst of concurrent callers waits for one of LOOP_POOL_CONNECTIONS connections, up to the operation timeout,
    where redis-py's plain asyncio pool would refuse the 101st outright (MaxConnectionsError)."""
    clients = _loop_clients.setdefault(asyncio.get_running_loop(), {})
    key = (url, repr(sorted(kwargs.items())))
    client = clients.get(key)
    if client is None:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, max_connections=LOOP_POOL_CONNECTIONS, timeout=kwargs.get("socket_timeout"), **kwargs
        )
        client = clients[key] = redis.asyncio.Redis(connection_pool=pool)
    return client
