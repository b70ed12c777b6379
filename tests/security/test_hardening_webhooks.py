"""The webhook address filter: IPv4 addresses hidden in IPv6 forms are refused, and the POST goes to the address
that was checked (a name re-pointed in between, DNS rebinding, is never asked again)."""

import socket
from typing import Any

import pytest

from elicitation.delivery import webhooks


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://[::ffff:127.0.0.1]/hook", "::ffff:7f00:1"),  # IPv4-mapped
        ("http://[::ffff:10.0.0.1]/hook", "::ffff:a00:1"),
        ("http://[::7f00:1]/hook", "::7f00:1"),  # IPv4-compatible (deprecated)
        ("http://[::a9fe:a9fe]/hook", "::a9fe:a9fe"),  # 169.254.169.254, the metadata service
        ("http://[2002:7f00:1::]/hook", "2002:7f00:1::"),  # 6to4 of 127.0.0.1
        ("http://[2002:c0a8:1::1]/hook", "2002:c0a8:1::1"),  # 6to4 of 192.168.0.1
        ("http://[64:ff9b::7f00:1]/hook", "64:ff9b::7f00:1"),  # NAT64 well-known prefix
        ("http://[64:ff9b::a00:1]/hook", "64:ff9b::a00:1"),
        ("http://[64:ff9b:1::a9fe:a9fe]/hook", "64:ff9b:1::a9fe:a9fe"),  # NAT64 local-use prefix
        (
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
        ),  # Teredo
    ],
)
def test_ipv4_addresses_embedded_in_ipv6_forms_are_refused(url: str, refused: str) -> None:
    assert webhooks.resolve_callback(url)[1] == refused


@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:93.184.216.34]/hook",
        "http://[2002:5db8:d822::1]/hook",
        "http://[64:ff9b::5db8:d822]/hook",
    ],
)
def test_ipv6_forms_of_a_public_ipv4_address_are_allowed(url: str) -> None:
    assert webhooks.resolve_callback(url)[1] is None


def test_a_refused_embedded_address_is_never_posted(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    monkeypatch.setattr(webhooks.httpx, "Client", None)  # any attempt to connect would fail loudly

    status, error = webhooks.post_event("http://[::ffff:127.0.0.1]:8000/hook", b"{}", {}, timeout=1)

    assert status is None
    assert error == "callback host resolves to a non-public address (::ffff:7f00:1); not delivered"


def test_the_post_connects_to_the_address_that_was_checked(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    answers = iter(["93.184.216.34", "127.0.0.1", "127.0.0.1"])  # the name is re-pointed after the first look
    lookups: list[str] = []

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> list[Any]:
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), 0))]

    sent: list[Any] = []

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            pass

        def __enter__(self) -> "Recorder":
            return self

        def __exit__(self, *args: Any) -> None:
            pass

        def stream(self, method: str, url: str, **kwargs: Any) -> Any:
            sent.append((method, url, kwargs["headers"], kwargs["extensions"]))
            response = webhooks.httpx.Response(204)
            return _Context(response)

    monkeypatch.setattr(webhooks.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(webhooks.httpx, "Client", Recorder)

    status, error = webhooks.post_event("https://hooks.example.com:8443/in?x=1", b"{}", {"X": "1"}, timeout=1)

    assert (status, error) == (204, "")
    assert lookups == ["hooks.example.com"]  # resolved once, for the check
    [(method, url, headers, extensions)] = sent
    assert method == "POST"
    assert url == "https://93.184.216.34:8443/in?x=1"
    assert headers == {"X": "1", "Host": "hooks.example.com:8443"}
    assert extensions == {"sni_hostname": "hooks.example.com"}  # TLS still checks the name's certificate


class _Context:
    def __init__(self, response: Any) -> None:
        self.response = response

    def __enter__(self) -> Any:
        return self.response

    def __exit__(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("url", "address", "expected_url", "host"),
    [
        ("http://hooks.example.com/in", "93.184.216.34", "http://93.184.216.34/in", "hooks.example.com"),
        (
            "http://u:p@hooks.example.com:81/in",
            "2606:2800::1",
            "http://u:p@[2606:2800::1]:81/in",
            "hooks.example.com:81",
        ),
    ],
)
def test_a_pinned_target_keeps_the_path_credentials_and_host_header(
    url: str, address: str, expected_url: str, host: str
) -> None:
    target, headers, extensions = webhooks.pinned_target(url, address)

    assert (target, headers, extensions) == (expected_url, {"Host": host}, {})
