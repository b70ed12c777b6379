"""Deployment hardening: `check --deploy` is clean with production settings, pages and API responses carry the
security headers, cookies are secure, and API keys are peppered HMACs compared in constant time."""

import asyncio
import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import override_settings

from elicitation.api.authentication import agent_for_key
from elicitation.models import Agent, Queue
from elicitation.queue import accounts, keys
from reviewhub.asgi import application

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "SECURE": "true",
    "REVIEWHUB_PRODUCTION": "true",
    "DEBUG": "false",
    "SECRET_KEY": "prod-3c1f0b7e9a4d2c8f6e5b1a0d9c7e3f2b8a6d4c1e0f9b7a5d3c2e1f0a9b8c7d6e5",
    "API_KEY_PEPPER": "pepper-8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c",
    "FLOW_ENCRYPTION_KEYS": "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
    "ALLOWED_HOSTS": "reviewhub.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://reviewhub.example.com",
    "PUBLIC_URL": "https://reviewhub.example.com",
    "TRUST_X_FORWARDED_PROTO": "true",
}


def run_in_production(code: str) -> subprocess.CompletedProcess[str]:
    # The embedded database is enough for what these subprocesses do; no services needed.
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "reviewhub.settings"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_reports_nothing_with_production_settings() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={
            **{
                k: v
                for k, v in os.environ.items()
                if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}
            },
            **PRODUCTION_ENV,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_production_refuses_to_start_without_a_secret_key() -> None:
    result = run_in_production("import os; os.environ.pop('SECRET_KEY'); import reviewhub.settings")
    assert result.returncode != 0
    assert "SECRET_KEY must be set in production" in result.stderr


def test_production_never_posts_webhooks_into_private_networks_unless_allowed() -> None:
    check = "import reviewhub.settings as s; print(s.WEBHOOK_ALLOW_PRIVATE_ADDRESSES)"
    refused = run_in_production(check)
    allowed = run_in_production("import os; os.environ['WEBHOOK_ALLOW_PRIVATE_ADDRESSES'] = 'true'; " + check)

    assert refused.stdout.strip() == "False", refused.stderr
    assert allowed.stdout.strip() == "True", allowed.stderr


PRODUCTION_RESPONSES = """
import json, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="reviewhub.example.com")
out = {}
plain = client.get("/accounts/login/")
out["redirect"] = [plain.status_code, plain.get("Location")]
paths = (("page", "/accounts/login/"), ("api", "/api/v1/requests"), ("static", "/static/reviewhub/reviewhub.css"))
for name, path in paths:
    response = client.get(path, HTTP_X_FORWARDED_PROTO="https")
    out[name] = {"status": response.status_code, "headers": dict(response.headers),
                 "cookies": {key: dict(morsel.items()) for key, morsel in response.cookies.items()}}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def production_responses() -> dict[str, Any]:
    result = run_in_production(PRODUCTION_RESPONSES)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_redirects_plain_http_to_https(production_responses: dict[str, Any]) -> None:
    status, location = production_responses["redirect"]
    assert status == 301
    assert location == "https://reviewhub.example.com/accounts/login/"


@pytest.mark.parametrize("which", ["page", "api", "static"])
def test_pages_api_and_static_responses_carry_the_security_headers(
    production_responses: dict[str, Any], which: str
) -> None:
    response = production_responses[which]
    headers = {key.lower(): value for key, value in response["headers"].items()}

    assert response["status"] == (401 if which == "api" else 200)
    assert headers["strict-transport-security"] == "max-age=31536000; includeSubDomains; preload"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
    csp = [part.strip() for part in headers["content-security-policy"].split(";")]
    assert "frame-ancestors 'none'" in csp
    assert "default-src 'self'" in csp
    assert "script-src 'self'" in csp  # no 'unsafe-inline': agent text on reviewer pages can never run
    assert not any("unsafe-inline" in part or "unsafe-eval" in part for part in csp)
    assert "object-src 'none'" in csp
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["permissions-policy"] == "camera=(), microphone=(), geolocation=()"


def test_production_cookies_are_secure_and_the_session_is_http_only(
    production_responses: dict[str, Any],
) -> None:
    csrf = production_responses["page"]["cookies"]["csrftoken"]
    assert csrf["secure"] is True
    assert csrf["samesite"] == "Lax"


def test_the_session_cookie_is_secure_http_only_and_same_site_after_sign_in() -> None:
    code = """
import json, django
django.setup()
from django.test.utils import setup_test_environment
from django.test import Client
from django.contrib.auth.models import User
from django.core.management import call_command
call_command("migrate", verbosity=0, interactive=False)
User.objects.create_user("alice", password="right-password-1")
client = Client(HTTP_HOST="reviewhub.example.com", HTTP_X_FORWARDED_PROTO="https")
response = client.post("/accounts/login/", {"username": "alice", "password": "right-password-1"})
morsel = response.cookies["sessionid"]
print(json.dumps({"status": response.status_code, **{k: morsel[k] for k in ("secure", "httponly", "samesite")}}))
"""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        db_env = {"SQLITE_PATH": str(Path(folder) / "prod.sqlite3")}
        result = subprocess.run(
            [sys.executable, "-c", code],
            env={
                **{
                    k: v
                    for k, v in os.environ.items()
                    if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}
                },
                **PRODUCTION_ENV,
                **db_env,
                "DJANGO_SETTINGS_MODULE": "reviewhub.settings",
            },
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    cookie = json.loads(result.stdout.strip().splitlines()[-1])
    assert cookie == {"status": 302, "secure": True, "httponly": True, "samesite": "Lax"}


@pytest.mark.django_db
def test_embedded_pages_and_api_carry_the_same_headers_without_hsts(agent_client: Any) -> None:
    page = Client().get("/accounts/login/")
    api = agent_client.get("/api/v1/requests")

    for response in (page, api):
        assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["X-Frame-Options"] == "DENY"
        assert "Strict-Transport-Security" not in response  # plain HTTP on loopback: HSTS would be wrong


async def test_static_files_from_the_asgi_application_carry_the_pages_headers() -> None:
    # Served by WhiteNoise inside Django's middleware chain, through the same ASGI app a server runs. (Channels'
    # HttpCommunicator refuses the body-less last message Django ends a file with, so the app is called as is.)
    page_policy = Client().get("/accounts/login/")["Content-Security-Policy"]
    sent: list[dict[str, Any]] = []

    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await (
            asyncio.Event().wait()
        )  # the client stays connected; Django stops listening once it has answered
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    path = "/static/reviewhub/reviewhub.js"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    await application(scope, receive, send)
    start, body = sent[0], b"".join(message.get("body", b"") for message in sent[1:])
    headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}

    assert start["status"] == 200
    assert body == (ROOT / "static/reviewhub/reviewhub.js").read_bytes()
    assert headers["content-type"].startswith("text/javascript")
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == page_policy
    assert headers["x-frame-options"] == "DENY"
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["permissions-policy"] == "camera=(), microphone=(), geolocation=()"


# --- API keys ---------------------------------------------------------------------------------------------------


def test_a_key_is_stored_as_an_hmac_under_the_pepper_not_a_plain_hash(settings: Any) -> None:
    settings.API_KEY_PEPPER = "pepper-one"
    issued = keys.issue_key("rh")

    assert issued.hash == hmac.new(b"pepper-one", issued.full.encode(), hashlib.sha256).hexdigest()
    assert issued.hash != hashlib.sha256(issued.full.encode()).hexdigest()
    assert issued.full not in issued.hash and issued.full.split("_", 2)[2] not in issued.hash


def test_without_the_pepper_a_leaked_hash_verifies_nothing(settings: Any) -> None:
    settings.API_KEY_PEPPER = "pepper-one"
    issued = keys.issue_key("rh")

    settings.API_KEY_PEPPER = "another-pepper"

    assert keys.matching_pepper(issued.full, issued.hash) is None


def test_keys_are_long_random_and_carry_only_a_public_prefix() -> None:
    first, second = keys.issue_key("rh"), keys.issue_key("rh")

    assert first.full != second.full
    assert first.full.startswith(f"rh_{first.prefix}_")
    assert len(first.full.split("_", 2)[2]) >= 43  # 32 random bytes, url-safe base64


def test_key_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys.hmac, "compare_digest", spy)
    issued = keys.issue_key("rh")

    assert keys.matching_pepper(issued.full, issued.hash) == "current"
    assert keys.matching_pepper(issued.full + "x", issued.hash) is None
    assert len(calls) == 2


@pytest.mark.django_db
def test_only_the_exact_live_key_authenticates(
    make_agent: Callable[..., tuple[Agent, str]], queue: Queue
) -> None:
    from django.utils import timezone

    agent, key = make_agent("agent-a", queue)
    prefix = agent.key_prefix

    assert agent_for_key(key) == agent
    assert agent_for_key(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert agent_for_key(f"rh_{prefix}_") is None
    assert agent_for_key(key.replace("rh_", "rhr_", 1)) is None
    assert Agent.objects.filter(key_hash__contains=key.split("_", 2)[2]).count() == 0

    agent.revoked_at = timezone.now()
    agent.save()
    assert agent_for_key(key) is None


@pytest.mark.django_db
def test_a_revoked_reviewer_token_is_refused(reviewer: User, queue: Queue) -> None:
    from django.utils import timezone
    from rest_framework.test import APIClient

    from elicitation.models import ReviewerToken

    token = accounts.create_reviewer_token(reviewer, name="script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/review/queues").status_code == 200

    ReviewerToken.objects.update(revoked_at=timezone.now())

    assert client.get("/api/v1/review/queues").status_code == 401


@override_settings(DEBUG=False)
@pytest.mark.django_db
def test_an_unexpected_error_is_a_bare_500_without_internals(
    monkeypatch: pytest.MonkeyPatch, agent_client: Any
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals: /srv/reviewhub/settings.py SECRET_KEY=abc")

    monkeypatch.setattr("elicitation.queue.selectors.agent_requests", explode)
    agent_client.raise_request_exception = False

    response = agent_client.get("/api/v1/requests")

    assert response.status_code == 500
    body = response.content.decode()
    assert "secret internals" not in body and "Traceback" not in body and "settings.py" not in body
