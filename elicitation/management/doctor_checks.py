"""What `manage.py doctor` checks: each check is a small function returning findings, each finding a level, what is
wrong (or fine) and how to fix it.

Settings first (PUBLIC_URL, DEBUG and the secrets that default to SECRET_KEY-derived values), then the live
dependencies the settings name: the database, Redis, the SMTP server, Slack, and ReviewHub itself at PUBLIC_URL.
A check that has nothing configured to look at says so at level ok. The module lives beside the command rather
than in `ops/`: management and ops are independent edges (pyproject.toml's layers).
"""

import ipaddress
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

import httpx
import redis
from django.conf import settings
from django.core import checks
from django.core.mail import get_connection
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http.request import split_domain_port, validate_host
from slack_sdk.errors import SlackApiError, SlackClientError

from elicitation.delivery import slack, web_push

DEV_SECRET_KEY_PREFIX = "dev-only-insecure-"  # reviewhub/settings.py's per-checkout default
DERIVED_FLOW_KEY_ID = (
    "derived"  # the one key settings derive from SECRET_KEY when FLOW_ENCRYPTION_KEYS is unset
)
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
OFFLINE_EMAIL_BACKENDS = {
    "django.core.mail.backends.console.EmailBackend",
    "django.core.mail.backends.dummy.EmailBackend",
    "django.core.mail.backends.filebased.EmailBackend",
    "django.core.mail.backends.locmem.EmailBackend",
}
SERVER_TIMEOUT_SECONDS = 5
NEW_SECRET = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    OK = "ok"


@dataclass(frozen=True)
class Finding:
    level: Level
    subject: str  # the setting or dependency, as the operator knows it
    problem: str  # what is wrong, or for ok what was found
    fix: str = ""


def error(subject: str, problem: str, fix: str) -> Finding:
    return Finding(Level.ERROR, subject, problem, fix)


def warning(subject: str, problem: str, fix: str) -> Finding:
    return Finding(Level.WARNING, subject, problem, fix)


def ok(subject: str, found: str) -> Finding:
    return Finding(Level.OK, subject, found)


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts() -> list[str]:
    # What Django itself accepts: with DEBUG on and ALLOWED_HOSTS empty it allows the loopback names.
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return list(settings.ALLOWED_HOSTS)


def public_url_host() -> str | None:
    """PUBLIC_URL's host as Django compares it with ALLOWED_HOSTS, or None if PUBLIC_URL is not an http(s) URL."""
    parts = urlsplit(settings.PUBLIC_URL)
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        return None
    domain, _port = split_domain_port(parts.netloc.lower())
    return domain or None


def django_system_checks() -> list[Finding]:
    """Django's own checks, with its deployment checks when DEBUG is off (`manage.py check --deploy`)."""
    messages = checks.run_checks(include_deployment_checks=not settings.DEBUG)
    findings = [
        Finding(
            Level.ERROR if message.level >= checks.ERROR else Level.WARNING,
            "Django check " + (message.id or ""),
            str(message.msg),
            str(message.hint or "See https://docs.djangoproject.com/en/stable/ref/checks/"),
        )
        for message in messages
        if message.level >= checks.WARNING and not message.is_silenced()
    ]
    return findings or [ok("Django checks", "Django's system checks pass.")]


def public_url() -> list[Finding]:
    url = settings.PUBLIC_URL
    example = "PUBLIC_URL=https://reviews.example.com"
    host = public_url_host()
    if host is None:
        return [
            error(
                "PUBLIC_URL",
                f"PUBLIC_URL={url!r} is not an http(s) URL with a host: hosted-flow links, e-mail and Slack links "
                "and the OAuth issuer are built on it.",
                f"Set PUBLIC_URL to the address reviewers and MCP hosts open, e.g. {example}.",
            )
        ]
    parts = urlsplit(url)
    findings = []
    if parts.path.strip("/") or parts.query or parts.fragment:
        findings.append(
            warning(
                "PUBLIC_URL",
                f"PUBLIC_URL={url!r} has a path, query or fragment: ReviewHub serves from the root of its host, "
                "so links built on it lead nowhere.",
                f"Set PUBLIC_URL to the origin only, e.g. {parts.scheme}://{parts.netloc}.",
            )
        )
    if not validate_host(host, allowed_hosts()):
        findings.append(
            error(
                "ALLOWED_HOSTS",
                f"PUBLIC_URL's host {host!r} is not in ALLOWED_HOSTS ({', '.join(allowed_hosts()) or 'empty'}): "
                "every link ReviewHub sends, and its OAuth metadata, would answer 400 Bad Request.",
                f"Add {host} to ALLOWED_HOSTS (comma-separated), or set PUBLIC_URL to a host it lists.",
            )
        )
    if not settings.DEBUG and is_loopback(host):
        findings.append(
            warning(
                "PUBLIC_URL",
                f"PUBLIC_URL={url!r} points at this machine while DEBUG is off: links in e-mails and Slack, "
                "hosted flows and the OAuth issuer only work from here.",
                f"Set PUBLIC_URL to the address reviewers and MCP hosts open, e.g. {example}.",
            )
        )
    if parts.scheme == "http" and not is_loopback(host):
        findings.append(
            warning(
                "PUBLIC_URL",
                f"PUBLIC_URL={url!r} is plain http on a remote host: MCP hosts refuse an OAuth server that is "
                "not https (OAuth 2.1), and sessions travel unencrypted.",
                "Serve ReviewHub behind HTTPS, then set PUBLIC_URL=https://… and SECURE=true.",
            )
        )
    if parts.scheme == "https" and not settings.SESSION_COOKIE_SECURE:
        findings.append(
            warning(
                "SECURE",
                "PUBLIC_URL is https but SECURE is off: session and CSRF cookies lack the Secure flag and "
                "there is no HSTS.",
                "Set SECURE=true (and TRUST_X_FORWARDED_PROTO=true if a proxy terminates TLS and sets it).",
            )
        )
    return findings or [ok("PUBLIC_URL", f"PUBLIC_URL={url} is an allowed host.")]


def debug_and_secrets() -> list[Finding]:
    """DEBUG off in production, and no secret left at its SECRET_KEY-derived development default."""
    host = public_url_host() or ""
    if settings.DEBUG:
        if not is_loopback(host):
            return [
                error(
                    "DEBUG",
                    f"DEBUG is on while ReviewHub is served at {settings.PUBLIC_URL}: error pages show settings "
                    "and source code to anyone who reaches it.",
                    "Set DEBUG=false (and REVIEWHUB_PRODUCTION=true, which refuses to start without the secrets).",
                )
            ]
        return [ok("DEBUG", "DEBUG is on, served on this machine: development defaults are fine here.")]
    findings = []
    if settings.SECRET_KEY.startswith(DEV_SECRET_KEY_PREFIX):
        findings.append(
            error(
                "SECRET_KEY",
                "SECRET_KEY is the development default, derived from the checkout's path: anyone who guesses "
                "it can forge sessions.",
                f"Set SECRET_KEY to a long random value: {NEW_SECRET}",
            )
        )
    if settings.API_KEY_PEPPER == settings.SECRET_KEY:
        findings.append(
            error(
                "API_KEY_PEPPER",
                "API_KEY_PEPPER is unset, so it is SECRET_KEY: rotating SECRET_KEY would lock out every agent "
                "and reviewer token.",
                f"Set API_KEY_PEPPER to a random value of its own: {NEW_SECRET}",
            )
        )
    if list(settings.FLOW_ENCRYPTION_KEYS) == [DERIVED_FLOW_KEY_ID]:
        findings.append(
            error(
                "FLOW_ENCRYPTION_KEYS",
                "FLOW_ENCRYPTION_KEYS is unset, so hosted-flow secrets are encrypted with a key derived from "
                "SECRET_KEY: rotating SECRET_KEY makes stored secrets unreadable.",
                "Set FLOW_ENCRYPTION_KEYS=<id>:<key>; `manage.py rotate_flow_key` prints one.",
            )
        )
    return findings or [
        ok("Secrets", "DEBUG is off; SECRET_KEY, API_KEY_PEPPER and FLOW_ENCRYPTION_KEYS are set.")
    ]


def database() -> list[Finding]:
    where = "DATABASE_URL" if connection.vendor == "postgresql" else "SQLITE_PATH"
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return [
            error(
                "Database",
                f"The {connection.vendor} database does not answer: {exc}".strip(),
                f"Check {where} and that the database server is running and reachable.",
            )
        ]
    if pending:
        return [
            error(
                "Database",
                f"{len(pending)} migration(s) are not applied (first: {pending[0][0]}).",
                "Run `manage.py migrate` (docker compose runs its `migrate` service).",
            )
        ]
    return [ok("Database", f"The {connection.vendor} database answers and is migrated.")]


def without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def redis_server() -> list[Finding]:
    if not settings.REDIS_URL:
        return [ok("Redis", "REDIS_URL is unset: one process, in-memory channel layer and eager tasks.")]
    shown = without_password(settings.REDIS_URL)
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, **settings.REDIS_TIMEOUTS)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, ValueError) as exc:
        return [
            error(
                "REDIS_URL",
                f"Redis at {shown} does not answer: {exc}",
                "Check REDIS_URL and that Redis is running and reachable from this host.",
            )
        ]
    return [ok("Redis", f"Redis at {shown} answers.")]


def smtp_server() -> list[Finding]:
    backend = settings.EMAIL_BACKEND
    if backend in OFFLINE_EMAIL_BACKENDS:
        if settings.DEBUG:
            return [
                ok(
                    "E-mail",
                    f"EMAIL_BACKEND is {backend.rsplit('.', 2)[-2]}: e-mails are not sent (development).",
                )
            ]
        return [
            warning(
                "EMAIL_BACKEND",
                f"EMAIL_BACKEND={backend} sends nothing: reviewers get no e-mail about waiting requests.",
                f"Set EMAIL_BACKEND={SMTP_BACKEND} and EMAIL_HOST, EMAIL_PORT (and EMAIL_HOST_USER, "
                "EMAIL_HOST_PASSWORD, EMAIL_USE_TLS as your server needs).",
            )
        ]
    if backend != SMTP_BACKEND:
        return [ok("E-mail", f"EMAIL_BACKEND={backend}: not an SMTP server doctor knows how to check.")]
    server = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    try:
        # Django's own backend: connects, says EHLO, starts TLS and signs in exactly as sending will.
        mail = get_connection(fail_silently=False)
        mail.open()
        mail.close()
    except (OSError, smtplib.SMTPException) as exc:
        return [
            error(
                "EMAIL_HOST",
                f"The SMTP server at {server} cannot be used: {exc or type(exc).__name__}",
                "Check EMAIL_HOST and EMAIL_PORT, EMAIL_USE_TLS / EMAIL_USE_SSL and EMAIL_HOST_USER / "
                "EMAIL_HOST_PASSWORD.",
            )
        ]
    return [ok("E-mail", f"The SMTP server at {server} accepts a connection.")]


def slack_token() -> list[Finding]:
    if not settings.SLACK_BOT_TOKEN:
        return [ok("Slack", "SLACK_BOT_TOKEN is unset: reviewers are not reached on Slack.")]
    try:
        answer = slack.client().auth_test()
    except SlackApiError as exc:
        return [
            error(
                "SLACK_BOT_TOKEN",
                f"Slack refuses SLACK_BOT_TOKEN: {exc.response.get('error', 'not ok')}.",
                "Copy the Bot User OAuth Token (xoxb-…) from your Slack app's OAuth & Permissions page.",
            )
        ]
    except (SlackClientError, OSError) as exc:
        return [
            error(
                "SLACK_API_URL",
                f"Slack's Web API at {settings.SLACK_API_URL} cannot be reached: {exc}",
                "Check that this host may open HTTPS connections to slack.com (or SLACK_API_URL).",
            )
        ]
    findings = [
        ok("Slack", f"SLACK_BOT_TOKEN is valid (team {answer.get('team')!r}, bot {answer.get('user')!r}).")
    ]
    if not settings.SLACK_SIGNING_SECRET:
        findings.append(
            warning(
                "SLACK_SIGNING_SECRET",
                "SLACK_SIGNING_SECRET is unset: Slack's buttons and answer forms are refused (404).",
                "Copy the Signing Secret from your Slack app's Basic Information page.",
            )
        )
    return findings


def web_push_keys() -> list[Finding]:
    problem = web_push.key_problem()
    if not web_push.configured():
        return [ok("Web Push", "WEB_PUSH_VAPID_PRIVATE_KEY is unset: reviewers are not reached by Web Push.")]
    if problem:
        fix = "Run `manage.py generate_vapid_keys` and set what it prints."
        return [warning("Web Push", problem + ".", fix)]
    return [ok("Web Push", "The VAPID key pair and contact are set.")]


def oauth_metadata() -> list[Finding]:
    """ReviewHub at PUBLIC_URL, as an MCP host finds it: its OAuth metadata must name PUBLIC_URL as the issuer."""
    url = settings.PUBLIC_URL + "/.well-known/oauth-authorization-server"
    try:
        response = httpx.get(url, timeout=SERVER_TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        return [
            warning(
                "Server",
                f"Nothing answers at {settings.PUBLIC_URL} ({exc or type(exc).__name__}): is ReviewHub running?",
                "Start it (`make run`, `docker compose up`), or set PUBLIC_URL to where it runs.",
            )
        ]
    if response.status_code != 200:
        hint = " (400: its ALLOWED_HOSTS lacks PUBLIC_URL's host)" if response.status_code == 400 else ""
        return [
            error(
                "Server",
                f"{url} answered {response.status_code}{hint}.",
                "Make PUBLIC_URL reach this ReviewHub (a proxy in between must pass the Host header through).",
            )
        ]
    try:
        issuer = response.json().get("issuer")
    except (ValueError, AttributeError):
        issuer = None
    if issuer != settings.PUBLIC_URL:
        return [
            error(
                "PUBLIC_URL",
                f"The server at {settings.PUBLIC_URL} calls itself {issuer!r}: it runs with another PUBLIC_URL, "
                "so its links and OAuth endpoints point elsewhere.",
                "Restart the server with the same PUBLIC_URL as this command (`make run` derives it from PORT).",
            )
        ]
    return [ok("Server", f"ReviewHub answers at {settings.PUBLIC_URL} and names it as its OAuth issuer.")]


Check = Callable[[], list[Finding]]
CHECKS: dict[str, Check] = {
    "django": django_system_checks,
    "public-url": public_url,
    "secrets": debug_and_secrets,
    "database": database,
    "redis": redis_server,
    "email": smtp_server,
    "slack": slack_token,
    "web-push": web_push_keys,
    "server": oauth_metadata,
}


def run_checks(skip: set[str] | None = None) -> list[Finding]:
    findings = []
    for name, check in CHECKS.items():
        if name in (skip or set()):
            continue
        try:
            findings += check()
        except Exception as exc:  # one broken check must not hide what the others find
            findings.append(
                error(
                    name,
                    f"The check itself failed: {type(exc).__name__}: {exc}",
                    f"Skip it with --skip {name}.",
                )
            )
    return findings
