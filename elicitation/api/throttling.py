"""Per-agent and per-reviewer request rates for the API, counted in the Django cache.

With REDIS_URL set the cache is Redis, so every ASGI process counts into the same window; embedded it is the
process's memory, which is the whole deployment. Counting is a fixed window with an atomic `incr` (a sliding log
read-modify-written from several processes would lose hits under load). A fixed window lets a client burst up to
twice the rate across a window boundary, which is acceptable for abuse protection.

If the cache itself fails (Redis restarting) requests are let through: a rate limit must never turn a Redis
outage into an API outage. A hung Redis (alive, not answering) would still cost every request a full operation
timeout before it is let through, so after one failure the limits are not counted at all for a short window
(`cache_breaker`): during a hang each process pays that timeout once per window, not once per request.

A process takes a window's calls from the shared count a slice at a time (`CallSlices`): one INCRBY reserves the
next `slice_size(rate)` numbers of the window's count, and the process hands them out itself until they are used,
so most API calls are counted without a round trip. Slices never overlap, so no more than the limit is ever let
through; an agent served by P processes may be refused up to (P - 1) x (slice - 1) calls before its limit, when the
other processes still hold numbers they have not used. Rates under SLICES_PER_WINDOW calls a window are counted
one call at a time, exactly.
"""

import functools
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis import Redis
from redis.commands.core import Script
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from elicitation.models import Agent
from elicitation.queue import clock
from reviewhub.rates import Rate
from reviewhub.redis_pool import shared_client

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


def count_hit(scope: str, ident: str, rate: Rate, calls: int = 1) -> tuple[int, int]:
    """Count `calls` requests in the current window; returns (requests so far in it, seconds until it ends)."""
    key, seconds_left = window(scope, ident, rate)
    return _increment(key, rate.window_seconds + 5, calls), seconds_left


# INCRBY, and the window's expiry on the count's first hit, as one atomic command (EVALSHA): a pipeline of SET NX EX
# and INCR cost the client twice the CPU for the same round trip.
COUNT_HIT_SCRIPT = (
    "local count = redis.call('INCRBY', KEYS[1], ARGV[2]) "
    "if count == tonumber(ARGV[2]) then redis.call('EXPIRE', KEYS[1], ARGV[1]) end "
    "return count"
)


@functools.cache
def _count_hit(client: Redis) -> Script:
    """The counter script bound to a shared client (one per URL): its SHA is computed once, not per call."""
    return client.register_script(COUNT_HIT_SCRIPT)


def _increment(key: str, timeout: int, calls: int = 1) -> int:
    """Atomically count `calls` hits under `key`, creating it with `timeout` if it is new."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        # One command instead of Django's three (add; incr = EXISTS + INCRBY): this runs on every API call. The
        # script is atomic, so it cannot reset a count another process started. The value is a plain integer, as
        # Django's Redis cache stores ints, so cache.get() reads it back under the same full key, from the same
        # server (the first of the cache's LOCATION, where Django's RedisCache writes).
        location = settings.CACHES["default"]["LOCATION"]
        url = location.split(",")[0] if isinstance(location, str) else next(iter(location))
        full_key = backend.make_and_validate_key(key)
        client = shared_client(url, **getattr(settings, "REDIS_TIMEOUTS", {}))
        return int(_count_hit(client)(keys=[full_key], args=[timeout, calls]))
    # add() is a no-op when the key exists, so concurrent first hits cannot reset each other's count.
    backend.add(key, 0, timeout=timeout)
    try:
        return int(backend.incr(key, calls))
    except ValueError:  # expired between add and incr
        backend.set(key, calls, timeout=timeout)
        return calls


# A slice is this fraction of a window's limit (at least 1 call): small enough that the calls other processes
# hold back stay a small part of the limit, large enough that most calls need no round trip.
SLICES_PER_WINDOW = 64


def slice_size(rate: Rate) -> int:
    return max(1, rate.limit // SLICES_PER_WINDOW)


@dataclass
class Slice:
    """Numbers `next`…`last` of the window counted under `key`, reserved by this process and not yet handed out."""

    key: str
    next: int
    last: int

    @property
    def unused(self) -> int:
        return max(0, self.last - self.next + 1)


class CallSlices:
    """This process's slices of each (scope, identity)'s current window (see the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[tuple[str, str], Slice] = {}

    def number_from_held(self, scope: str, ident: str, rate: Rate) -> tuple[int, int] | None:
        """This call's number in its window (over the limit: refused) and the seconds until the window ends, from
        the process's slice; None when the slice is used up (or of an earlier window)."""
        key, seconds_left = window(scope, ident, rate)
        with self.lock:
            held = self.held.get((scope, ident))
            # Past the limit the window is spent: refusals need no number from the shared count.
            if held is not None and held.key == key and (held.next <= held.last or held.next > rate.limit):
                number, held.next = held.next, held.next + 1
                return number, seconds_left
        return None

    def reserve(self, scope: str, ident: str, rate: Rate) -> tuple[int, int]:
        """Reserve the next slice of the shared count (one round trip); its first number is this call's."""
        size = slice_size(rate)
        key, _ = window(scope, ident, rate)
        last, seconds_left = count_hit(scope, ident, rate, size)
        if window(scope, ident, rate)[0] != key:
            return last - size + 1, seconds_left  # counted in a window that ended meanwhile: nothing to keep
        with self.lock:
            held = self.held.get((scope, ident))
            # Of two threads that reserved at once, the later keeps its rest unless the held one has more left.
            if held is None or held.key != key or held.unused <= size - 1:
                self.held[(scope, ident)] = Slice(key, last - size + 2, last)
        return last - size + 1, seconds_left

    def unused(self, scope: str, ident: str, key: str) -> int:
        with self.lock:
            held = self.held.get((scope, ident))
            return held.unused if held is not None and held.key == key else 0


call_slices = CallSlices()


def current_count(scope: str, ident: str, rate: Rate) -> tuple[int, int]:
    """Like count_hit, without counting: the calls made in the window so far, less the numbers this process has
    reserved and not yet handed out; for checks made before a long wait."""
    key, seconds_left = window(scope, ident, rate)
    return int(cache.get(key, 0)) - call_slices.unused(scope, ident, key), seconds_left


@dataclass(frozen=True)
class Charge:
    """One call counted: `retry_after` is the seconds until the window ends when the call was over the rate (None
    within it); `left` how many more calls the window allows (infinite without a rate, None when not counted)."""

    retry_after: int | None
    left: float | None
    seconds_left: int


def charge_call(scope: str, ident: str | None, rate: Rate | None) -> Charge:
    """Count one call against `rate`."""
    if rate is None or ident is None:
        return Charge(None, math.inf, 0)
    numbered = call_slices.number_from_held(scope, ident, rate)
    if numbered is None:
        if not cache_breaker.allow():
            return Charge(None, None, 0)
        try:
            numbered = call_slices.reserve(scope, ident, rate)
        except Exception as exc:  # the cache is down or hung: fail open, loudly, and stop asking for a while
            cache_breaker.failed()
            logger.warning(
                "rate limit cache unavailable (%s); requests allowed uncounted for %ss",
                type(exc).__name__,
                cache_breaker.open_seconds,
            )
            return Charge(None, None, 0)
        cache_breaker.succeeded()
    count, seconds_left = numbered
    return Charge(None if count <= rate.limit else seconds_left, max(0, rate.limit - count), seconds_left)


def charge(scope: str, ident: str | None, rate: Rate | None) -> int | None:
    """Count one call; None if it is within `rate`, else the seconds until the window ends."""
    return charge_call(scope, ident, rate).retry_after


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


def charge_agent(agent_id: int) -> bool:
    """Count one call of the agent's, as AgentRateThrottle does for a view; True if it is within AGENT_RATE."""
    return charge_agent_call(agent_id).retry_after is None


def charge_agent_call(agent_id: int) -> Charge:
    """`charge_agent`, saying how many calls the agent's window still allows."""
    return charge_call(AgentRateThrottle.scope, str(agent_id), getattr(settings, "AGENT_RATE", None))


def agent_retry_after(agent_id: int) -> int | None:
    """Seconds until an agent that is over its rate may call again, or None: lets a long-poll refuse up front
    instead of holding the connection only to answer 429 at the end."""
    rate: Rate | None = getattr(settings, "AGENT_RATE", None)
    if rate is None or not cache_breaker.allow():
        return None
    try:
        count, seconds_left = current_count(AgentRateThrottle.scope, str(agent_id), rate)
    except Exception:
        cache_breaker.failed()
        return None
    cache_breaker.succeeded()
    return seconds_left if count >= rate.limit else None
