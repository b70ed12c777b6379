"""The reviewer pages draw on REVIEWER_RATE, the budget the reviewer API's throttle charges: one account, one budget,
whichever door it uses. Every page view is one call, counted exactly as `api/throttling.ReviewerRateThrottle`
counts an API call (same scope, same identity, same window), so a reviewer whose budget is spent over the API is
refused on the pages too, and the other way round."""

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpResponse

from elicitation.api import throttling
from elicitation.reviewer.errors import throttled_page
from elicitation.reviewer.signed_in import SignedInRequest


def charge_reviewer_rate(user: User) -> int | None:
    """One call against the user's REVIEWER_RATE: None within it, else the seconds until the window ends."""
    rate = getattr(settings, throttling.ReviewerRateThrottle.rate_setting, None)
    return throttling.charge(throttling.ReviewerRateThrottle.scope, str(user.pk), rate)


def within_reviewer_rate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A signed-in reviewer's page view, charged once per request; over the rate, the 429 page. Goes under
    `login_required`: nobody signed in has no budget to charge and is sent to the sign-in page first."""

    @functools.wraps(view)
    def wrapped(request: SignedInRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        retry_after = charge_reviewer_rate(request.user)
        if retry_after is not None:
            return throttled_page(request, retry_after)
        return view(request, *args, **kwargs)

    return wrapped
