"""Secrets never reach log output or error reports: the redaction filter on every handler, and flow views hidden
from Django's exception reporter (POST data and locals)."""

import io
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.signals import got_request_exception
from django.test import Client, RequestFactory
from django.views.debug import ExceptionReporter

from elicitation.flows import crypto, redaction
from elicitation.models import FlowStatus, HostedFlow
from tests.flows.conftest import new_secret, submit

AGENT_KEY = "rh_0123abcd_" + "A" * 43
REVIEWER_TOKEN = "rhr_89abcdef_" + "b-_9" * 10


def filtered_output(record_factory: Callable[[logging.Logger], None]) -> str:
    """What a handler carrying the filter writes for the records `record_factory` logs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(redaction.RedactSecretsFilter())
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("tests.flows.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        record_factory(logger)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return stream.getvalue()


def test_api_keys_keep_their_prefix_and_lose_the_rest() -> None:
    output = filtered_output(lambda log: log.warning("auth with %s then %s", AGENT_KEY, REVIEWER_TOKEN))
    assert AGENT_KEY not in output and REVIEWER_TOKEN not in output
    assert "rh_0123abcd_[redacted]" in output and "rhr_89abcdef_[redacted]" in output


def test_values_in_flight_are_redacted_in_messages_and_tracebacks() -> None:
    secret = new_secret()

    def log(logger: logging.Logger) -> None:
        with redaction.secrets_in_flight([secret, None, "ab"]):
            logger.info("got %r", {"api_token": secret})
            try:
                raise ValueError(f"cannot parse {secret}")
            except ValueError:
                logger.exception("failed")
        logger.info("after: %s", secret)  # outside the block the value is no longer known

    output = filtered_output(log)
    lines = output.splitlines()
    assert secret not in "\n".join(lines[:-1])
    assert "[redacted]" in lines[0] and "ValueError: cannot parse [redacted]" in output
    assert lines[-1] == f"after: {secret}"


def test_values_attached_to_a_request_are_redacted_in_records_about_it() -> None:
    secret = new_secret()
    request = RequestFactory().post("/flows/x/", {"answer-api_token": secret})
    redaction.attach_to_request(request, [secret])
    output = filtered_output(
        lambda log: log.error("Internal error for %s", secret, extra={"request": request, "status_code": 500})
    )
    assert secret not in output and "[redacted]" in output


def test_records_about_flow_requests_mask_their_post_data() -> None:
    flow_request = RequestFactory().post("/flows/x/", {"answer-api_token": "hunter2hunter2"})
    other_request = RequestFactory().post("/accounts/login/", {"username": "alice"})
    for request in (flow_request, other_request):
        filtered_output(lambda log, r=request: log.error("boom", extra={"request": r}))  # type: ignore[misc]
    assert getattr(flow_request, "sensitive_post_parameters", None) == "__ALL__"
    assert not hasattr(other_request, "sensitive_post_parameters")


def test_every_configured_handler_carries_the_filter(settings: Any) -> None:
    def real(handlers: list[logging.Handler]) -> list[logging.Handler]:
        # pytest's capture handlers are the test's own instruments.
        return [h for h in handlers if not type(h).__module__.startswith("_pytest")]

    configured = set(settings.LOGGING["handlers"])
    attached = real(logging.getLogger().handlers) + [
        h
        for name, logger in logging.Logger.manager.loggerDict.items()
        if name.split(".")[0] in {"django", "uvicorn", "channels", "elicitation", "reviewhub", "celery"}
        for h in real(getattr(logger, "handlers", []))
        if not isinstance(h, logging.NullHandler)
    ]
    assert {h.get_name() for h in attached} == configured == {"console", "mail_admins"}
    for handler in attached:
        assert any(isinstance(f, redaction.RedactSecretsFilter) for f in handler.filters), handler
    # Django's own default handlers (no filter) were replaced, not kept alongside.
    assert [h.get_name() for h in logging.getLogger("django").handlers] == ["mail_admins"]


# --- exception reports --------------------------------------------------------------------------------------------


@pytest.fixture
def captured_exceptions() -> Iterator[list[tuple[Any, Any]]]:
    """(request, exc_info) of every unhandled view exception, as Django's handler sees it."""
    seen: list[tuple[Any, Any]] = []

    def record(sender: Any, request: Any, **kwargs: Any) -> None:
        seen.append((request, sys.exc_info()))

    got_request_exception.connect(record)
    yield seen
    got_request_exception.disconnect(record)


def broken_encryption() -> tuple[str, bytes]:
    raise RuntimeError("key store unavailable")


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True])
def test_an_error_while_submitting_leaks_nothing_into_error_reports(
    open_flow: Callable[..., dict[str, Any]],
    reviewer: User,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    captured_exceptions: list[tuple[Any, Any]],
    caplog: pytest.LogCaptureFixture,
    debug: bool,
) -> None:
    settings.DEBUG = debug
    settings.ADMINS = [("Ops", "ops@example.com")]
    flow = open_flow()
    secret = new_secret()
    monkeypatch.setattr(crypto, "current_key", broken_encryption)
    client = Client(raise_request_exception=False)
    client.force_login(reviewer)
    caplog.set_level(logging.DEBUG)
    response = submit(client, flow, api_token=secret, account="acme")
    assert response.status_code == 500
    assert secret not in response.content.decode()  # the DEBUG technical page too
    ((request, exc_info),) = captured_exceptions
    reporter = ExceptionReporter(request, *exc_info)
    text, html = reporter.get_traceback_text(), reporter.get_traceback_html()
    assert "key store unavailable" in text  # it is the real report...
    assert secret not in text and secret not in html  # ...without the secret, in POST data or in any frame
    assert "answer-api_token" in text  # the POST key is listed, its value masked
    assert secret not in caplog.text
    if not debug:
        (report,) = mail.outbox  # mail_admins sent the report, masked as well
        assert "key store unavailable" in report.body
        assert secret not in report.body
        assert all(secret not in str(content) for content, _ in report.alternatives)
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.OPEN
