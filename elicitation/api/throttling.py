"""Per-agent and per-reviewer request rates for the API, counted in the Django cache.

With REDIS_URL set the cache is Redis, so every ASGI process counts into the same window; embedded it is the
process's memory, which is the whole deployment. Counting is a fixed window, and every call is one atomic increment
of the window's count (one round trip): no call is refused before the limit and none is let through after it,
however many processes and threads serve a client (a sliding log read-modify-written from several processes would
lose hits under load). A fixed window lets a client burst up to twice the rate across a window boundary, which is
acceptable for abuse protection.

If the cache itself fails (Redis restarting) requests are let through: a rate limit must never turn a Redis
outage into an API outage. A hung Redis (alive, not answering) would still cost every request a full operation
timeout before it is let through, so after one failure the limits are not counted at all for a short window
(`cache_breaker`): during a hang each process pays that timeout once per window, not once per request.
"""

import asyncio
import functools
import logging
import math
import threading
import time
import weakref
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from elicitation.models import Agent
from elicitation.queue import clock
from reviewhub.rates import Rate
from reviewhub.redis_pool import loop_client, shared_client

logger = logging.getLogger(__name__)

# Every counter key starts with this; the test suite gives each test its own so counts never leak between tests
# sharing one Redis.
KEY_NAMESPACE = "rh"

# Long enough that a hang costs one request per process a timeout, not every request; short enough that limits
# are counted again within seconds of Redis answering.
BREAKER_OPEN_SECONDS = 5.0


class CacheBreaker:
    """Closed: calls go to the cache. After a failure: open for `open_seconds`, calls are refused at once (the
    caller lets the request through). Then one call at a time probes; its success closes the breaker."""

    def __init__(self, open_seconds: float) -> None:
        self.open_seconds = open_seconds
        self.lock = threading.Lock()
        self.open_until: float | None = None
        self.probing = False

    def allow(self) -> bool:
        with self.lock:
            if self.open_until is None:
                return True
            if self.probing or time.monotonic() < self.open_until:
                return False
            self.probing = True
            return True

    def succeeded(self) -> None:
        if self.open_until is None:  # the common case, without the lock: every API call passes here
            return
        with self.lock:
            self.open_until, self.probing = None, False

    def failed(self) -> None:
        with self.lock:
            self.open_until, self.probing = time.monotonic() + self.open_seconds, False


cache_breaker = CacheBreaker(BREAKER_OPEN_SECONDS)


def window(scope: str, ident: str, rate: Rate) -> tuple[str, int]:
    """The current window's counter key, and the seconds until the window ends."""
    now = clock.now().timestamp()
    window_start = int(now // rate.window_seconds) * rate.window_seconds
    key = f"{KEY_NAMESPACE}:rate:{scope}:{ident}:{window_start}"
    return key, max(1, math.ceil(window_start + rate.window_seconds - now))


def count_hit(scope: str, ident: str, rate: Rate) -> tuple[int, int]:
    """Count one request in the current window; returns (requests so far in it, seconds until it ends)."""
    key, seconds_left = window(scope, ident, rate)
    return _increment(key, rate.window_seconds + 5), seconds_left


async def acount_hit(scope: str, ident: str, rate: Rate) -> tuple[int, int]:
    """`count_hit` from an event loop."""
    key, seconds_left = window(scope, ident, rate)
    return await _aincrement(key, rate.window_seconds + 5), seconds_left


# INCR, and the window's expiry on the count's first hit, as one atomic command (EVALSHA): a pipeline of SET NX EX
# and INCR cost the client twice the CPU for the same round trip.
COUNT_HIT_SCRIPT = (
    "local count = redis.call('INCR', KEYS[1]) "
    "if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end "
    "return count"
)


@functools.cache
def _count_hit(client: Redis) -> Script:
    """The counter script bound to a shared client (one per URL): its SHA is computed once, not per call."""
    return client.register_script(COUNT_HIT_SCRIPT)


_loop_count_hits: "weakref.WeakKeyDictionary[AsyncRedis, AsyncScript]" = weakref.WeakKeyDictionary()


def _redis_key(backend: RedisCache, key: str) -> tuple[str, str]:
    """The Redis URL and full key Django's Redis cache keeps `key` under: the first server of the cache's
    LOCATION, where Django's RedisCache writes, so cache.get() reads a count back."""
    location = settings.CACHES["default"]["LOCATION"]
    url = location.split(",")[0] if isinstance(location, str) else next(iter(location))
    return url, backend.make_and_validate_key(key)


def _increment(key: str, timeout: int) -> int:
    """Atomically count one hit under `key`, creating it with `timeout` if it is new."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        # One command instead of Django's three (add; incr = EXISTS + INCRBY): this runs on every API call. The
        # script is atomic, so it cannot reset a count another process started. The value is a plain integer, as
        # Django's Redis cache stores ints.
        url, full_key = _redis_key(backend, key)
        client = shared_client(url, **getattr(settings, "REDIS_TIMEOUTS", {}))
        return int(_count_hit(client)(keys=[full_key], args=[timeout]))
    # add() is a no-op when the key exists, so concurrent first hits cannot reset each other's count.
    backend.add(key, 0, timeout=timeout)
    try:
        return int(backend.incr(key))
    except ValueError:  # expired between add and incr
        backend.set(key, 1, timeout=timeout)
        return 1


async def _aincrement(key: str, timeout: int) -> int:
    """`_increment` from an event loop: with Redis, the same script awaited on the loop's own client (no thread);
    any other cache through a thread, as its calls block."""
    backend = caches["default"]
    if not isinstance(backend, RedisCache):
        return await asyncio.to_thread(_increment, key, timeout)
    url, full_key = _redis_key(backend, key)
    client = loop_client(url, **getattr(settings, "REDIS_TIMEOUTS", {}))
    script = _loop_count_hits.get(client)
    if script is None:
        script = _loop_count_hits[client] = client.register_script(COUNT_HIT_SCRIPT)
    return int(await script(keys=[full_key], args=[timeout]))


def charge(scope: str, ident: str | None, rate: Rate | None) -> int | None:
    """Count one call against `rate`; None if it is within it (or could not be counted), else the seconds until
    the window ends."""
    if rate is None or ident is None or not cache_breaker.allow():
        return None
    try:
        count, seconds_left = count_hit(scope, ident, rate)
    except Exception as exc:
        _uncounted(exc)
        return None
    return _verdict(count, rate, seconds_left)


async def acharge(scope: str, ident: str | None, rate: Rate | None) -> int | None:
    """`charge` for a caller on the event loop (the MCP doors): the same count, window and breaker, one awaited
    round trip instead of a trip to a thread and back."""
    if rate is None or ident is None or not cache_breaker.allow():
        return None
    try:
        count, seconds_left = await acount_hit(scope, ident, rate)
    except Exception as exc:
        _uncounted(exc)
        return None
    return _verdict(count, rate, seconds_left)


def _uncounted(exc: Exception) -> None:
    """The cache is down or hung: fail open, loudly, and stop asking for a while."""
    cache_breaker.failed()
    logger.warning(
        "rate limit cache unavailable (%s); requests allowed uncounted for %ss",
        type(exc).__name__,
        cache_breaker.open_seconds,
    )


def _verdict(count: int, rate: Rate, seconds_left: int) -> int | None:
    cache_breaker.succeeded()
    return None if count <= rate.limit else seconds_left


class WindowRateThrottle(BaseThrottle):
    scope = ""
    rate_setting = ""

    def __init__(self) -> None:
        self.retry_after: int | None = None

    def identity(self, request: Request) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        self.retry_after = charge(
            self.scope, self.identity(request), getattr(settings, self.rate_setting, None)
        )
        return self.retry_after is None

    def wait(self) -> float | None:
        return self.retry_after


class AgentRateThrottle(WindowRateThrottle):
    """AGENT_RATE per agent key, across every process."""

    scope = "agent"
    rate_setting = "AGENT_RATE"

    def identity(self, request: Request) -> str | None:
        return str(request.auth.pk) if isinstance(request.auth, Agent) else None


class ReviewerRateThrottle(WindowRateThrottle):
    """REVIEWER_RATE per reviewer account, whether it calls with a session or with a token."""

    scope = "reviewer"
    rate_setting = "REVIEWER_RATE"

    def identity(self, request: Request) -> str | None:
        user = request.user
        if user is None or not getattr(user, "is_authenticated", False) or getattr(user, "pk", None) is None:
            return None
        return str(user.pk)
