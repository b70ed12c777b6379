# ruff: noqa: F811  (smtp_server and slack_api are the reach tests' fixtures, shared by import)
"""`manage.py doctor`: a good configuration passes (exit 0); each broken one fails, naming the setting and the fix.

Live dependencies are real servers on loopback: aiosmtpd for SMTP and the stand-in for Slack's Web API from the
reach tests (the real slack_sdk client calls its auth.test), a uvicorn process for ReviewHub itself."""

import os
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from elicitation.management import doctor_checks
from elicitation.management.doctor_checks import Level
from tests.delivery.liveserver import REPO, LiveServer, free_port
from tests.delivery.reach.conftest import FakeSlack, Mailbox, slack_api, smtp_server  # noqa: F401

GOOD_SECRET = "k" * 20 + "-a-long-random-production-secret-key-0123456789"


def doctor(*args: str) -> str:
    """The command's output; raises CommandError when it exits non-zero."""
    out = StringIO()
    call_command("doctor", *args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> str:
    out = StringIO()
    with pytest.raises(CommandError, match=r"doctor: [1-9]\d* error\(s\)") as failure:
        call_command("doctor", *args, stdout=out)
    assert failure.value.returncode == 1
    return out.getvalue()


@pytest.fixture
def production(settings: Any) -> Iterator[Any]:
    """A configuration doctor has nothing to say against except where a test breaks it; nothing listens at
    PUBLIC_URL (a free loopback port), which is only a warning."""
    settings.DEBUG = False
    settings.SECRET_KEY = GOOD_SECRET
    settings.API_KEY_PEPPER = "another-long-random-value-for-the-pepper"
    settings.FLOW_ENCRYPTION_KEYS = {"k1": b"\x01" * 32}
    settings.PUBLIC_URL = f"http://127.0.0.1:{free_port()}"
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    settings.SLACK_BOT_TOKEN = ""
    yield settings


@pytest.mark.django_db
def test_a_good_configuration_passes_with_live_smtp_and_slack(
    production: Any, smtp_server: Mailbox, slack_api: FakeSlack
) -> None:
    output = doctor()

    assert "doctor: 0 error(s)" in output
    assert "[ok] Database: " in output
    assert (
        f"[ok] E-mail: The SMTP server at 127.0.0.1:{production.EMAIL_PORT} accepts a connection." in output
    )
    assert "[ok] Slack: SLACK_BOT_TOKEN is valid" in output
    assert [(call.method, call.token) for call in slack_api.calls] == [("auth.test", "xoxb-test-token")]
    assert f"[warning] Server: Nothing answers at {production.PUBLIC_URL}" in output
    assert "[error]" not in output


@pytest.mark.django_db
def test_the_make_run_configuration_passes_quietly_with_warnings_only(settings: Any) -> None:
    settings.DEBUG = True
    settings.PUBLIC_URL = f"http://127.0.0.1:{free_port()}"

    assert doctor("--warnings-only", "--skip", "server") == ""
    assert "doctor: 0 error(s), 0 warning(s)." in doctor("--skip", "server")


def test_a_public_url_host_that_allowed_hosts_refuses_is_an_error_naming_the_fix(production: Any) -> None:
    production.PUBLIC_URL = "https://reviews.example.com"

    output = refused("--skip", "server", "--skip", "database")

    assert "[error] ALLOWED_HOSTS: PUBLIC_URL's host 'reviews.example.com' is not in ALLOWED_HOSTS" in output
    assert "fix: Add reviews.example.com to ALLOWED_HOSTS" in output


@pytest.mark.parametrize("url", ["reviews.example.com", "ftp://reviews.example.com", "http://host:port", ""])
def test_a_public_url_that_is_not_an_http_url_is_an_error(production: Any, url: str) -> None:
    production.PUBLIC_URL = url

    findings = doctor_checks.public_url()

    assert [(f.level, f.subject) for f in findings] == [(Level.ERROR, "PUBLIC_URL")]
    assert "Set PUBLIC_URL to the address reviewers and MCP hosts open" in findings[0].fix


def test_allowed_hosts_patterns_are_matched_as_django_matches_them(production: Any) -> None:
    production.PUBLIC_URL = "https://reviews.example.com"
    production.ALLOWED_HOSTS = [".example.com"]
    production.SESSION_COOKIE_SECURE = True

    assert [f.level for f in doctor_checks.public_url()] == [Level.OK]


def test_https_without_secure_and_http_on_a_remote_host_are_warnings(production: Any) -> None:
    production.ALLOWED_HOSTS = ["reviews.example.com"]
    production.PUBLIC_URL = "https://reviews.example.com"
    assert [(f.level, f.subject) for f in doctor_checks.public_url()] == [(Level.WARNING, "SECURE")]

    production.PUBLIC_URL = "http://reviews.example.com"
    [finding] = doctor_checks.public_url()
    assert finding.level == Level.WARNING and "OAuth 2.1" in finding.problem


def test_development_secrets_with_debug_off_are_errors_naming_each_setting(production: Any) -> None:
    production.SECRET_KEY = "dev-only-insecure-/somewhere"
    production.API_KEY_PEPPER = production.SECRET_KEY
    production.FLOW_ENCRYPTION_KEYS = {"derived": b"\x00" * 32}

    output = refused("--skip", "server", "--skip", "database", "--skip", "django")

    assert "[error] SECRET_KEY: SECRET_KEY is the development default" in output
    assert "[error] API_KEY_PEPPER: API_KEY_PEPPER is unset" in output
    assert "[error] FLOW_ENCRYPTION_KEYS: FLOW_ENCRYPTION_KEYS is unset" in output
    assert "fix: Set FLOW_ENCRYPTION_KEYS=<id>:<key>; `manage.py rotate_flow_key` prints one." in output


def test_debug_on_a_public_address_is_an_error(production: Any) -> None:
    production.DEBUG = True
    production.ALLOWED_HOSTS = ["reviews.example.com"]
    production.PUBLIC_URL = "https://reviews.example.com"

    [finding] = doctor_checks.debug_and_secrets()

    assert (finding.level, finding.subject) == (Level.ERROR, "DEBUG")
    assert finding.fix.startswith("Set DEBUG=false")


def test_an_smtp_server_that_does_not_answer_is_an_error(production: Any) -> None:
    production.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    production.EMAIL_HOST, production.EMAIL_PORT = "127.0.0.1", free_port()

    [finding] = doctor_checks.smtp_server()

    assert (finding.level, finding.subject) == (Level.ERROR, "EMAIL_HOST")
    assert f"127.0.0.1:{production.EMAIL_PORT}" in finding.problem and "EMAIL_PORT" in finding.fix


def test_an_smtp_server_that_cannot_take_the_configured_login_is_an_error(
    production: Any, smtp_server: Mailbox
) -> None:
    production.EMAIL_HOST_USER, production.EMAIL_HOST_PASSWORD = (
        "bob",
        "secret",
    )  # it offers no AUTH without TLS

    [finding] = doctor_checks.smtp_server()

    assert (finding.level, finding.subject) == (Level.ERROR, "EMAIL_HOST")
    assert "AUTH" in finding.problem


def test_an_offline_email_backend_in_production_is_a_warning(production: Any) -> None:
    production.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"

    [finding] = doctor_checks.smtp_server()

    assert (finding.level, finding.subject) == (Level.WARNING, "EMAIL_BACKEND")


def test_a_slack_token_slack_refuses_is_an_error(production: Any, slack_api: FakeSlack) -> None:
    slack_api.answer = lambda method, body: {"ok": False, "error": "invalid_auth"}  # type: ignore[method-assign]

    [finding] = doctor_checks.slack_token()

    assert (finding.level, finding.subject) == (Level.ERROR, "SLACK_BOT_TOKEN")
    assert "invalid_auth" in finding.problem and "xoxb-" in finding.fix
    assert [call.method for call in slack_api.calls] == ["auth.test"]


def test_a_valid_slack_token_without_a_signing_secret_is_a_warning(
    production: Any, slack_api: FakeSlack
) -> None:
    production.SLACK_SIGNING_SECRET = ""

    findings = doctor_checks.slack_token()

    assert [(f.level, f.subject) for f in findings] == [
        (Level.OK, "Slack"),
        (Level.WARNING, "SLACK_SIGNING_SECRET"),
    ]


def test_redis_that_does_not_answer_is_an_error_without_its_password(production: Any) -> None:
    production.REDIS_URL = f"redis://:hunter2@127.0.0.1:{free_port()}/0"

    [finding] = doctor_checks.redis_server()

    assert (finding.level, finding.subject) == (Level.ERROR, "REDIS_URL")
    assert "hunter2" not in finding.problem and "127.0.0.1" in finding.problem


def test_warnings_only_prints_errors_and_warnings_but_never_fails(production: Any) -> None:
    production.PUBLIC_URL = "https://reviews.example.com"

    output = doctor("--warnings-only", "--skip", "server", "--skip", "database")

    assert "[error] ALLOWED_HOSTS" in output
    assert "[ok]" not in output and "doctor:" not in output


def test_a_check_that_crashes_is_reported_and_the_others_still_run(
    production: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> list[doctor_checks.Finding]:
        raise RuntimeError("boom")

    monkeypatch.setitem(doctor_checks.CHECKS, "redis", broken)

    output = refused("--skip", "server", "--skip", "database")

    assert "[error] redis: The check itself failed: RuntimeError: boom" in output
    assert "[ok] E-mail" in output or "[warning] EMAIL_BACKEND" in output


# --- ReviewHub itself at PUBLIC_URL, and the command as operators run it -------------------------------------------


@pytest.fixture(scope="module")
def server_on_localhost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server whose PUBLIC_URL names localhost; it needs no tables to answer its OAuth metadata."""
    port = free_port()
    database = tmp_path_factory.mktemp("doctor-server") / "db.sqlite3"
    server = LiveServer(
        env={
            "PUBLIC_URL": f"http://localhost:{port}",
            "ALLOWED_HOSTS": "localhost,127.0.0.1",
            "SQLITE_PATH": str(database),
            "DATABASE_URL": "",
            "REDIS_URL": "",
        },
        port=port,
    )
    try:
        yield server.start()
    finally:
        server.stop()


def test_the_server_at_public_url_naming_itself_there_is_ok(
    settings: Any, server_on_localhost: LiveServer
) -> None:
    settings.PUBLIC_URL = f"http://localhost:{server_on_localhost.port}"

    assert [f.level for f in doctor_checks.oauth_metadata()] == [Level.OK]


def test_a_server_started_with_another_public_url_is_an_error(
    settings: Any, server_on_localhost: LiveServer
) -> None:
    settings.PUBLIC_URL = server_on_localhost.url  # http://127.0.0.1:<port>: the same server, another name

    [finding] = doctor_checks.oauth_metadata()

    assert (finding.level, finding.subject) == (Level.ERROR, "PUBLIC_URL")
    assert f"calls itself 'http://localhost:{server_on_localhost.port}'" in finding.problem
    assert "same PUBLIC_URL" in finding.fix


def run_doctor_process(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "DEBUG": "true",
        "PUBLIC_URL": f"http://127.0.0.1:{free_port()}",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "doctor"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_command_exits_1_on_an_unmigrated_database(tmp_path: Path) -> None:
    result = run_doctor_process(tmp_path, SQLITE_PATH=str(tmp_path / "fresh.sqlite3"))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "[error] Database: " in result.stdout and "migration(s) are not applied" in result.stdout
    assert "fix: Run `manage.py migrate`" in result.stdout
    assert "doctor: 1 error(s)" in result.stderr


def test_the_command_exits_1_when_the_database_cannot_be_opened(tmp_path: Path) -> None:
    result = run_doctor_process(tmp_path, SQLITE_PATH=str(tmp_path / "missing" / "db.sqlite3"))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "[error] Database: The sqlite database does not answer" in result.stdout
    assert "fix: Check SQLITE_PATH" in result.stdout
