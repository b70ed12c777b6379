"""Rotate API_KEY_PEPPER without locking every agent out at once.

Stored keys are HMACs under the pepper and the keys themselves are never stored, so they cannot be re-hashed
up front. Instead, for a window:

1. `manage.py rotate_api_key_pepper` prints a new pepper. Set API_KEY_PEPPER to it and API_KEY_PEPPER_PREVIOUS
   to the old one (comma-separated if several), restart. Every key keeps working; each is re-hashed under the
   new pepper the first time it is used.
2. After the window (longer than your least frequent agent's interval), remove API_KEY_PEPPER_PREVIOUS. A key
   not used during the window stops working and is rotated in the admin.

Webhook signing secrets derive from the pepper too: receivers need the new `whsec_…` (admin, agent page).
"""

import secrets
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Print a new API_KEY_PEPPER and the settings for a dual-pepper rotation window."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(
            "Set these, keeping the old pepper in API_KEY_PEPPER_PREVIOUS for the rotation window:"
        )
        self.stdout.write("API_KEY_PEPPER_PREVIOUS=<the current API_KEY_PEPPER>")
        if settings.API_KEY_PEPPER_PREVIOUS:
            self.stdout.write("(a window is already open: finish it first, or list every previous pepper)")
        self.stdout.write(f"API_KEY_PEPPER={secrets.token_urlsafe(48)}")
