"""Password guessing protection: after LOGIN_FAILURE_LIMIT failed logins for one username from one address within
LOGIN_FAILURE_WINDOW_SECONDS, further attempts are refused until the window ends, even with the right password.

Three small parts, so the login view itself (elicitation/urls.py) needs no change:
- a `user_login_failed` receiver counts failures (Django sends it for every failed `authenticate()`),
- `LoginThrottleBackend`, first in AUTHENTICATION_BACKENDS, refuses to authenticate a locked pair; that covers
  every login form, the admin's included,
- `LoginThrottleMiddleware` answers a locked POST to the sign-in page with 429, Retry-After and a clear message
  instead of the generic "wrong password" the form would show.
Counts live in the Django cache (Redis in services mode), so every process shares them; if the cache is down the
check fails open rather than locking everyone out.
"""

import contextlib
import hashlib
import logging
import math
from typing import Any

from django.conf import settings
from django.contrib.auth import user_logged_in, user_login_failed
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.forms.utils import ErrorDict
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils.deprecation import MiddlewareMixin

from elicitation.api import throttling
from elicitation.queue import clock

logger = logging.getLogger(__name__)


def client_address(request: HttpRequest | None) -> str:
    # REMOTE_ADDR only: X-Forwarded-For is whatever the client says unless a trusted proxy rewrote it.
    return (request.META.get("REMOTE_ADDR") or "unknown") if request is not None else "unknown"


def _key(username: str, address: str) -> str:
    # Hashed so any username is a safe cache key and no username is readable from the cache.
    digest = hashlib.sha256(f"{username.strip().lower()}\0{address}".encode()).hexdigest()
    return f"{throttling.KEY_NAMESPACE}:login:{digest}"


def record_failure(username: str, address: str) -> int:
    """Count one failed login; the window starts at the first failure and is not extended by later ones."""
    window = settings.LOGIN_FAILURE_WINDOW_SECONDS
    key = _key(username, address)
    now = clock.now().timestamp()
    until = cache.get(key + ":until")
    if until is None or float(until) <= now:  # no window open, or the last one is over: start a new one
        cache.set_many({key: 0, key + ":until": now + window}, timeout=window)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between the check and incr
        cache.set_many({key: 1, key + ":until": now + window}, timeout=window)
        return 1


def locked_for(username: str, address: str) -> int | None:
    """Seconds until this username may try again from this address, or None when it may try now."""
    if not username:
        return None
    key = _key(username, address)
    try:
        failures = cache.get(key, 0)
        if int(failures) < settings.LOGIN_FAILURE_LIMIT:
            return None
        until = cache.get(key + ":until")
    except Exception as exc:
        logger.warning("login throttle cache unavailable (%s); attempt allowed", type(exc).__name__)
        return None
    if until is None:
        return settings.LOGIN_FAILURE_WINDOW_SECONDS
    seconds_left = float(until) - clock.now().timestamp()
    return math.ceil(seconds_left) if seconds_left > 0 else None


def forget(username: str, address: str) -> None:
    key = _key(username, address)
    cache.delete_many([key, key + ":until"])


@receiver(user_login_failed)
def count_failed_login(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    username = credentials.get("username")
    if not isinstance(username, str) or not username:
        return
    try:
        failures = record_failure(username, client_address(request))
    except Exception as exc:
        logger.warning("login throttle cache unavailable (%s); failure not counted", type(exc).__name__)
        return
    if failures == settings.LOGIN_FAILURE_LIMIT:
        # The address is logged; the username is not (it may be a password typed into the wrong box).
        logger.warning("login locked after %d failures from %s", failures, client_address(request))


@receiver(user_logged_in)
def reset_after_login(sender: Any, request: HttpRequest | None, user: User, **kwargs: Any) -> None:
    if request is None:
        return
    try:
        forget(user.get_username(), client_address(request))
    except Exception:
        logger.warning("login throttle cache unavailable; counter not reset")


class LoginThrottleBackend:
    """Authenticates nobody; refuses (PermissionDenied stops Django trying the other backends) while locked.

    Deliberately not a BaseBackend: without `get_user` Django never records it as a session's backend (the test
    client's force_login picks the first backend that has one)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if username and locked_for(username, client_address(request)) is not None:
            raise PermissionDenied("Too many failed sign-in attempts.")
        return None


def locked_message(seconds: int) -> str:
    minutes = max(1, (seconds + 59) // 60)
    return (
        "Too many failed sign-in attempts for this username from your address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )


def login_paths() -> set[str]:
    paths = set()
    for name in ("login", "admin:login"):
        with contextlib.suppress(NoReverseMatch):  # the admin may be unmounted
            paths.add(reverse(name))
    return paths


class LoginThrottleMiddleware(MiddlewareMixin):
    """A locked POST to a sign-in page gets 429 with Retry-After and says why, before any password is checked."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if request.method != "POST" or request.path not in login_paths():
            return None
        username = request.POST.get("username", "")
        seconds = locked_for(username, client_address(request)) if isinstance(username, str) else None
        if seconds is None:
            return None
        form = AuthenticationForm(request, data=request.POST)
        # Errors are set by hand: letting the form validate would call authenticate() and count another failure.
        form._errors = ErrorDict()  # type: ignore[attr-defined]
        form.cleaned_data = {}
        form.add_error(None, locked_message(seconds))
        response = render(
            request,
            "registration/login.html",
            {"form": form, "next": request.POST.get("next", "")},
            status=429,
        )
        response["Retry-After"] = str(seconds)
        return response
