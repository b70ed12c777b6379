"""Rotate the hosted-flow encryption key (elicitation/flows/crypto.py).

1. `manage.py rotate_flow_key` prints a new key entry. Put it FIRST in FLOW_ENCRYPTION_KEYS, keeping the old
   entries after it, and restart: new secrets are encrypted under it, stored ones still decrypt under theirs.
2. `manage.py rotate_flow_key --reencrypt` (with the new setting live) re-encrypts every stored secret under the
   current key. Afterwards the old entries may be removed.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from elicitation.flows import crypto
from elicitation.models import FlowStatus, HostedFlow


class Command(BaseCommand):
    help = "Print a new FLOW_ENCRYPTION_KEYS entry, or (--reencrypt) move stored secrets to the current key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reencrypt",
            action="store_true",
            help="Re-encrypt stored secrets under the current (first) key.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["reencrypt"]:
            self.stdout.write(
                "Put this entry first in FLOW_ENCRYPTION_KEYS, keep the old ones after it, restart,"
            )
            self.stdout.write("then run `manage.py rotate_flow_key --reencrypt`:")
            self.stdout.write(crypto.new_key_entry())
            return
        current_id, _ = crypto.current_key()
        moved = 0
        stale = HostedFlow.objects.filter(status=FlowStatus.SUBMITTED, ciphertext__isnull=False).exclude(
            key_id=current_id
        )
        for flow_id in stale.values_list("pk", flat=True).iterator():
            with transaction.atomic():
                flow = HostedFlow.objects.select_for_update().filter(pk=flow_id).first()
                if flow is None or flow.ciphertext is None or flow.nonce is None or flow.key_id == current_id:
                    continue  # retrieved or purged meanwhile
                key_id, nonce, ciphertext = crypto.reencrypt_content(
                    flow.pk, flow.key_id, flow.nonce, flow.ciphertext
                )
                HostedFlow.objects.filter(pk=flow.pk, key_id=flow.key_id).update(
                    key_id=key_id, nonce=nonce, ciphertext=ciphertext
                )
                moved += 1
        self.stdout.write(f"re-encrypted {moved} stored secret(s) under key {current_id!r}")
