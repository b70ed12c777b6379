"""An OpenID Connect provider's HTTP side on a loopback port (discovery, JWKS, token, userinfo) whose answers the test
writes, and the two legs of a sign-in through ReviewHub's own views with Django's test client.

For the checks a real provider never fails (a token signed by another key, an altered payload, a wrong audience):
tests/browser/test_oidc_sign_in.py signs in against django-oauth-toolkit's real provider instead."""

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from django.http import HttpResponse
from django.test import Client

CLIENT_ID = "reviewhub-tests"
CLIENT_SECRET = "client-secret-for-tests-only-0123456789"
BACKEND = "elicitation.reviewer.company_sign_in.backend.CompanySignInBackend"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class StubProvider:
    def __init__(self) -> None:
        self.key = new_key()
        self.kid = "stub-key-1"
        self.id_token = ""
        self.userinfo: dict[str, Any] = {}
        self.token_requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path == "/.well-known/openid-configuration":
                    self.answer(stub.discovery())
                elif path == "/jwks":
                    # No "alg" in the key, as many providers publish it: ReviewHub's own check must hold the line.
                    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(stub.key.public_key()))
                    self.answer({"keys": [{**public, "kid": stub.kid, "use": "sig"}]})
                elif path == "/userinfo":
                    self.answer(stub.userinfo)
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                stub.token_requests.append(
                    {
                        "form": {k: v[0] for k, v in form.items()},
                        "authorization": self.headers.get("Authorization"),
                    }
                )
                self.answer({"access_token": "access-1", "token_type": "Bearer", "id_token": stub.id_token})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        }

    def claims(self, nonce: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": "user-0001",
            "exp": now + 300,
            "iat": now,
            "nonce": nonce,
            "preferred_username": "alice",
            "email": "alice@acme.test",
            "groups": [],
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def sign(self, claims: dict[str, Any], key: Any = None, algorithm: str = "RS256") -> str:
        return jwt.encode(claims, key or self.key, algorithm=algorithm, headers={"kid": self.kid})

    def hand_out(self, claims: dict[str, Any], token: str | None = None) -> None:
        """The next token request answers with `token` (signed `claims` by default), userinfo with `claims`."""
        self.id_token = token if token is not None else self.sign(claims)
        self.userinfo = {k: v for k, v in claims.items() if k not in {"iss", "aud", "exp", "iat", "nonce"}}

    def start(self) -> "StubProvider":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def with_payload(token: str, claims: dict[str, Any]) -> str:
    """`token` with its payload replaced and its signature kept: what an attacker who altered it in transit sends."""
    header, _, signature = token.split(".")
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


def begin(client: Client) -> tuple[str, dict[str, str]]:
    """The first leg: ReviewHub sends the browser to the provider. Returns the state and the authorize query."""
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 302, response
    query = {k: v[0] for k, v in parse_qs(urlsplit(response["Location"]).query).items()}
    return query["state"], query


def finish(client: Client, state: str) -> HttpResponse:
    """The second leg: the provider sends the browser back with a code."""
    response: HttpResponse = client.get("/oidc/callback/", {"code": "code-1", "state": state})
    return response


def sign_in(client: Client, stub: StubProvider, **claims: Any) -> HttpResponse:
    state, query = begin(client)
    stub.hand_out(stub.claims(query["nonce"], **claims))
    return finish(client, state)


def signed_in_user_id(client: Client) -> str | None:
    return client.session.get("_auth_user_id")


@contextmanager
def configured_for_stub(settings: Any) -> Iterator[StubProvider]:
    """ReviewHub configured for a stub provider, as OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET would."""
    stub = StubProvider().start()
    settings.OIDC_ISSUER = stub.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_PROVIDER_NAME = "Acme SSO"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, BACKEND]
    try:
        yield stub
    finally:
        stub.stop()
