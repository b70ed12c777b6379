"""Flow values at rest: AES-256-GCM under rotatable keys, bound to their flow, configured loudly."""

import base64
import os
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.test import APIClient

from elicitation.flows import crypto, hosted_flows
from elicitation.models import HostedFlow
from reviewhub import settings as project_settings
from tests.flows.conftest import new_secret, submit

K1 = os.urandom(32)
K2 = os.urandom(32)


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


# --- the settings helper ------------------------------------------------------------------------------------------


def test_keys_are_read_in_order_the_first_being_current(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RH_FLOW_KEYS", f"k2:{b64(K2)}, k1:{base64.urlsafe_b64encode(K1).decode()}")
    keys = project_settings.env_flow_keys("RH_FLOW_KEYS", "unused")
    assert list(keys) == ["k2", "k1"]
    assert keys == {"k2": K2, "k1": K1}


def test_without_keys_one_is_derived_from_the_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RH_FLOW_KEYS", raising=False)
    first = project_settings.env_flow_keys("RH_FLOW_KEYS", "secret-a")
    assert list(first) == ["derived"] and len(first["derived"]) == 32
    assert first == project_settings.env_flow_keys("RH_FLOW_KEYS", "secret-a")  # stable across restarts
    assert first != project_settings.env_flow_keys("RH_FLOW_KEYS", "secret-b")
    assert first["derived"] != b"secret-a".ljust(32, b"\0")  # derived, not the secret itself


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (f"{b64(K1)}", "must be <id>:<base64 key>"),
        (f"bad id:{b64(K1)}", "must be <id>:<base64 key>"),
        (f"k1:{b64(K1)},k1:{b64(K2)}", "lists key id 'k1' twice"),
        (f"k1:{b64(K1[:16])}", "is 16 bytes; AES-256 needs 32"),
        ("k1:not*base64!", "is not valid base64"),
        (f"k1:{b64(K1)},", "entry 2 must be"),
    ],
    # Named, not shown: the keys are random per process, and pytest-xdist's workers must collect the same ids.
    ids=["no id", "bad id", "id twice", "short key", "not base64", "empty entry"],
)
def test_bad_key_settings_fail_loudly(monkeypatch: pytest.MonkeyPatch, raw: str, message: str) -> None:
    monkeypatch.setenv("RH_FLOW_KEYS", raw)
    with pytest.raises(ImproperlyConfigured, match=message):
        project_settings.env_flow_keys("RH_FLOW_KEYS", "unused")


def test_the_error_never_quotes_the_key_material(monkeypatch: pytest.MonkeyPatch) -> None:
    short = b64(K1[:16])
    monkeypatch.setenv("RH_FLOW_KEYS", f"k1:{short}")
    with pytest.raises(ImproperlyConfigured) as error:
        project_settings.env_flow_keys("RH_FLOW_KEYS", "unused")
    assert short not in str(error.value)


# --- encryption -----------------------------------------------------------------------------------------------


def test_a_ciphertext_is_bound_to_its_flow(settings: Any) -> None:
    settings.FLOW_ENCRYPTION_KEYS = {"k1": K1}
    key_id, nonce, ciphertext = crypto.encrypt_content("flow-a", {"api_token": "hunter2hunter2"})
    assert crypto.decrypt_content("flow-a", key_id, nonce, ciphertext) == {"api_token": "hunter2hunter2"}
    with pytest.raises(InvalidTag):
        crypto.decrypt_content("flow-b", key_id, nonce, ciphertext)
    tampered = bytes([ciphertext[0] ^ 1]) + ciphertext[1:]
    with pytest.raises(InvalidTag):
        crypto.decrypt_content("flow-a", key_id, nonce, tampered)


def test_every_encryption_uses_a_fresh_nonce(settings: Any) -> None:
    settings.FLOW_ENCRYPTION_KEYS = {"k1": K1}
    first = crypto.encrypt_content("f", {"v": "same"})
    second = crypto.encrypt_content("f", {"v": "same"})
    assert first[1] != second[1] and first[2] != second[2]


def test_a_missing_key_id_is_an_operator_error_not_silent_loss(settings: Any) -> None:
    settings.FLOW_ENCRYPTION_KEYS = {"k1": K1}
    key_id, nonce, ciphertext = crypto.encrypt_content("f", {"v": "x"})
    settings.FLOW_ENCRYPTION_KEYS = {"k2": K2}
    with pytest.raises(crypto.FlowKeyUnavailable, match="'k1'"):
        crypto.decrypt_content("f", key_id, nonce, ciphertext)


@pytest.mark.django_db
def test_key_rotation_keeps_old_ciphertexts_readable(
    settings: Any,
    open_flow: Callable[..., dict[str, Any]],
    reviewer: User,
    browser_for: Callable[[User], Client],
    flows_client: APIClient,
) -> None:
    settings.FLOW_ENCRYPTION_KEYS = {"k1": K1}
    old_flow, new_flow = open_flow(), open_flow()
    old_secret, new_secret_value = new_secret(), new_secret()
    client = browser_for(reviewer)
    submit(client, old_flow, api_token=old_secret)
    # Rotation: the new key goes in front, the old one stays behind it for reading.
    settings.FLOW_ENCRYPTION_KEYS = {"k2": K2, "k1": K1}
    submit(client, new_flow, api_token=new_secret_value)
    assert HostedFlow.objects.get(pk=old_flow["id"]).key_id == "k1"
    assert HostedFlow.objects.get(pk=new_flow["id"]).key_id == "k2"
    old = flows_client.post(f"/api/v1/flows/{old_flow['id']}/retrieve")
    new = flows_client.post(f"/api/v1/flows/{new_flow['id']}/retrieve")
    assert old.json()["content"]["api_token"] == old_secret
    assert new.json()["content"]["api_token"] == new_secret_value


@pytest.mark.django_db
def test_a_ciphertext_moved_to_another_flow_does_not_decrypt(
    settings: Any,
    open_flow: Callable[..., dict[str, Any]],
    reviewer: User,
    browser_for: Callable[[User], Client],
    flows_client: APIClient,
) -> None:
    settings.FLOW_ENCRYPTION_KEYS = {"k1": K1}
    victim, attacker = open_flow(), open_flow()
    client = browser_for(reviewer)
    submit(client, victim, api_token=new_secret())
    submit(client, attacker, api_token=new_secret())
    stolen = HostedFlow.objects.get(pk=victim["id"])
    HostedFlow.objects.filter(pk=attacker["id"]).update(nonce=stolen.nonce, ciphertext=stolen.ciphertext)
    with pytest.raises(InvalidTag):
        hosted_flows.retrieve_hosted_flow(
            attacker["id"], agent=HostedFlow.objects.get(pk=victim["id"]).request.agent
        )
    # The failed read destroyed nothing.
    assert HostedFlow.objects.get(pk=attacker["id"]).ciphertext is not None
