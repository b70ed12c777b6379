"""A push service on loopback, as a browser vendor's would receive ReviewHub's pushes (RFC 8030), checking what
real ones check and reading what the browser would:

- the VAPID `Authorization: vapid t=<JWT>, k=<key>` header (RFC 8292): an ES256 JWT whose signature verifies
  against `k`, which must be the server's public key; `aud` this service's origin, `exp` in the future and at most
  24 hours ahead, `sub` a mailto: or https: contact. Anything else is answered 401/403, as push services do;
- the body, `Content-Encoding: aes128gcm` (RFC 8188/8291), decrypted with the subscription's private key and
  auth secret, which only the browser holds (the test made them): what the browser's service worker would read.

A subscription's endpoint is /push/<name>; `gone` names answer 410 (`not_found` 404), as for an unsubscribed
browser."""

import base64
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """What a browser keeps of its subscription: the private half of p256dh and the auth secret."""

    name: str
    private_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def p256dh(self) -> str:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(point)

    def decrypt(self, body: bytes) -> bytes:
        return bytes(
            http_ece.decrypt(body, private_key=self.private_key, auth_secret=self.auth, version="aes128gcm")
        )


@dataclass
class Delivery:
    """One push the service accepted, decrypted."""

    browser: str
    headers: dict[str, str]
    claims: dict[str, Any]
    payload: dict[str, Any]


class PushService:
    def __init__(self, server_public_key: str) -> None:
        self.server_public_key = server_public_key
        self.browsers: dict[str, Browser] = {}
        self.gone: set[str] = set()
        self.not_found: set[str] = set()
        self.deliveries: list[Delivery] = []
        self.refusals: list[tuple[int, str]] = []
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.origin = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def start(self) -> "PushService":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def browser(self, name: str) -> Browser:
        self.browsers[name] = Browser(name)
        return self.browsers[name]

    def endpoint(self, name: str) -> str:
        return f"{self.origin}/push/{name}"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Delivery]:
        give_up = time.monotonic() + timeout
        while len(self.deliveries) < count and time.monotonic() < give_up:
            time.sleep(0.01)
        return self.deliveries

    # --- what the service checks ----------------------------------------------------------------------------------

    def check_vapid(self, authorization: str) -> dict[str, Any]:
        """The JWT's claims when the header is a valid VAPID one for this service; ValueError saying why not."""
        scheme, _, params = authorization.partition(" ")
        if scheme.lower() != "vapid":
            raise ValueError("not the vapid scheme")
        fields = dict(part.strip().split("=", 1) for part in params.split(","))
        token, key = fields.get("t", ""), fields.get("k", "")
        if key != self.server_public_key:
            raise ValueError("k is not the application server key the browser subscribed with")
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(key))
        header = jwt.get_unverified_header(token)
        if header.get("alg") != "ES256":
            raise ValueError("alg is not ES256")
        claims = jwt.decode(
            token, key=public, algorithms=["ES256"], audience=self.origin, options={"require": ["exp", "aud"]}
        )
        if not (time.time() < claims["exp"] <= time.time() + 24 * 3600 + 60):
            raise ValueError("exp is not within the next 24 hours")
        if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
            raise ValueError("sub is not a mailto: or https: contact")
        return dict(claims)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, text: str = "") -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                name = self.path.removeprefix("/push/")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if name in service.gone:
                    return self._answer(410, "subscription expired")
                if name in service.not_found or name not in service.browsers:
                    return self._answer(404, "no such subscription")
                try:
                    claims = service.check_vapid(self.headers.get("Authorization", ""))
                except Exception as exc:  # every refusal is the test's finding
                    service.refusals.append((401, f"{type(exc).__name__}: {exc}"))
                    return self._answer(401, "bad vapid")
                if self.headers.get("Content-Encoding") != "aes128gcm" or "TTL" not in self.headers:
                    service.refusals.append((400, "content encoding or TTL"))
                    return self._answer(400, "aes128gcm and TTL required")
                plain = service.browsers[name].decrypt(body)
                service.deliveries.append(
                    Delivery(name, {k.lower(): v for k, v in self.headers.items()}, claims, json.loads(plain))
                )
                return self._answer(201)

        return Handler
