"""The one source of "now" for the domain, so tests can move time without sleeping."""

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    return timezone.now()
