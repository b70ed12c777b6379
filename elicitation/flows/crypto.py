"""Hosted-flow secrets at rest: AES-256-GCM (from `cryptography`) under the current key of
settings.FLOW_ENCRYPTION_KEYS, with the flow id as associated data so a ciphertext cannot be moved to another flow.
Older keys listed after the current one still decrypt, so keys rotate without a migration."""

import base64
import json
import os
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.views.decorators.debug import sensitive_variables

NONCE_BYTES = 12  # the AES-GCM standard nonce; random per encryption, never reused under a key


class FlowKeyUnavailable(ImproperlyConfigured):
    """A ciphertext names a key id that is no longer configured: an operator error, never silently dropped."""


def current_key() -> tuple[str, bytes]:
    keys: dict[str, bytes] = settings.FLOW_ENCRYPTION_KEYS
    if not keys:
        raise ImproperlyConfigured("FLOW_ENCRYPTION_KEYS is empty; hosted flows need at least one key.")
    key_id = next(iter(keys))
    return key_id, keys[key_id]


def associated_data(flow_id: UUID | str) -> bytes:
    return str(flow_id).encode()


@sensitive_variables()
def encrypt_content(flow_id: UUID | str, content: dict[str, Any]) -> tuple[str, bytes, bytes]:
    """Returns (key id, nonce, ciphertext) of the JSON content, bound to this flow id."""
    key_id, key = current_key()
    nonce = os.urandom(NONCE_BYTES)
    plaintext = json.dumps(content, separators=(",", ":")).encode()
    return key_id, nonce, AESGCM(key).encrypt(nonce, plaintext, associated_data(flow_id))


@sensitive_variables()
def decrypt_content(
    flow_id: UUID | str, key_id: str, nonce: bytes | memoryview, ciphertext: bytes | memoryview
) -> dict[str, Any]:
    """Raises FlowKeyUnavailable for an unknown key id and InvalidTag for tampered or misplaced ciphertext."""
    key = settings.FLOW_ENCRYPTION_KEYS.get(key_id)
    if key is None:
        raise FlowKeyUnavailable(
            f"Hosted flow {flow_id} was encrypted under key id {key_id!r}, which FLOW_ENCRYPTION_KEYS no "
            "longer lists; add the key back (after the current one) to read it."
        )
    plaintext = AESGCM(key).decrypt(bytes(nonce), bytes(ciphertext), associated_data(flow_id))
    content: dict[str, Any] = json.loads(plaintext)
    return content


def new_key_entry(taken_ids: list[str] | None = None) -> str:
    """A fresh `<id>:<base64 32 bytes>` entry for FLOW_ENCRYPTION_KEYS, its id unlike any configured one."""
    taken = set(settings.FLOW_ENCRYPTION_KEYS) | set(taken_ids or [])
    number = 1
    while f"k{number}" in taken:
        number += 1
    return f"k{number}:{base64.urlsafe_b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


@sensitive_variables()
def reencrypt_content(
    flow_id: UUID | str, key_id: str, nonce: bytes | memoryview, ciphertext: bytes | memoryview
) -> tuple[str, bytes, bytes]:
    """The same content under the current key (the plaintext never leaves this function)."""
    return encrypt_content(flow_id, decrypt_content(flow_id, key_id, nonce, ciphertext))
