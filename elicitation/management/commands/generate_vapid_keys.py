"""Print a new VAPID key pair for Web Push (docs/reach.md "Web Push").

Browsers subscribe with the public key; a subscription made under one key pair only accepts pushes signed with
it, so replacing the pair means every reviewer turns push on again in each browser. Keep the private key as
secret as SECRET_KEY: it is the server's proof to push services that a push is ReviewHub's.
"""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from elicitation.delivery import web_push


class Command(BaseCommand):
    help = "Print a new VAPID key pair (WEB_PUSH_VAPID_PRIVATE_KEY / WEB_PUSH_VAPID_PUBLIC_KEY) for Web Push."

    def handle(self, *args: Any, **options: Any) -> None:
        private, public = web_push.generate_keys()
        if settings.WEB_PUSH_VAPID_PRIVATE_KEY:
            self.stderr.write(
                "A key pair is already set: browsers subscribed under it stop receiving pushes if you replace it."
            )
        self.stdout.write(f"WEB_PUSH_VAPID_PRIVATE_KEY={private}")
        self.stdout.write(f"WEB_PUSH_VAPID_PUBLIC_KEY={public}")
        if not settings.WEB_PUSH_CONTACT:
            self.stdout.write("WEB_PUSH_CONTACT=mailto:<an address push services may write to>")
