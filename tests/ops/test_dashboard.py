"""`/dashboard/` for supervisors and staff, `/metrics` for Prometheus, and the SVG charts they are drawn with."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import ElicitationRequest
from elicitation.ops import charts
from elicitation.queue import transitions

SVG = re.compile(r'<svg class="chart[^"]*"[^>]*role="img"')


@pytest.fixture
def supervisor(make_reviewer, queue) -> User:
    return make_reviewer("sam", queue, supervisor=True)


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def history(make_request, reviewer, agent, clock) -> None:
    def make_request_now(**fields):
        request = make_request(**fields)
        # created_at is auto_now_add (wall clock): align it with the test clock, as the audit row is.
        ElicitationRequest.objects.filter(pk=request.pk).update(created_at=clock.current)
        return request

    for action in ("accept", "decline"):
        request = make_request_now()
        clock.advance(seconds=40)
        transitions.claim_request(request.pk, user=reviewer)
        clock.advance(seconds=60)
        content = {"approve": True} if action == "accept" else None
        transitions.respond(request.pk, user=reviewer, action=action, content=content)
    transitions.withdraw_request(make_request_now().pk, agent=agent)
    make_request_now(expires_in=5)
    clock.advance(seconds=10)
    transitions.expire_overdue_requests()
    make_request_now()
    clock.advance(seconds=1)


def test_anonymous_visitors_are_sent_to_sign_in(client: Client, db) -> None:
    response = client.get("/dashboard/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/dashboard/")


def test_a_reviewer_who_supervises_nothing_is_refused(reviewer: User) -> None:
    assert logged_in(reviewer).get("/dashboard/").status_code == 403


def test_a_supervisor_sees_charts_of_their_queues_only(supervisor: User, other_queue, history) -> None:
    response = logged_in(supervisor).get("/dashboard/")
    page = response.content.decode()

    assert response.status_code == 200
    # 7 charts with "Time to a human" (ops/reach_metrics.py), each drawn for a desktop card and a phone's
    assert len(SVG.findall(page)) == 14
    assert "payments" in page
    assert f'value="{other_queue.slug}"' not in page
    assert "no-cache" in response["Cache-Control"]


def test_staff_see_every_queue(admin_user: User, other_queue, history) -> None:
    page = logged_in(admin_user).get("/dashboard/").content.decode()
    assert f'<option value="{other_queue.slug}"' in page


def test_the_page_has_no_inline_script_or_style(admin_user: User, history) -> None:
    response = logged_in(admin_user).get("/dashboard/?days=1")
    page = response.content.decode()

    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert " style=" not in page and "<style" not in page
    assert all(re.search(r'\bsrc="/static/', tag) for tag in re.findall(r"<script[^>]*>", page))
    assert '<link rel="stylesheet" href="/static/reviewhub/dashboard.css">' in page


def test_the_figures_reach_the_charts(admin_user: User, history) -> None:
    page = logged_in(admin_user).get("/dashboard/?days=1").content.decode()
    # Time to first claim is 40 s for both answered requests; one of each outcome closed.
    assert "payments p50: 40 s" in page
    assert "payments · accept: 1" in page
    assert "payments · expired: 1" in page
    assert "payments · withdrawn: 1" in page
    assert "alice · decline: 1" in page


@pytest.mark.parametrize("query", ["days=bogus", "days=365", "queue=unknown", "queue=other"])
def test_bad_or_foreign_parameters_fall_back_to_the_defaults(
    supervisor: User, other_queue, query: str
) -> None:
    response = logged_in(supervisor).get(f"/dashboard/?{query}")
    assert response.status_code == 200
    assert response.context["days"] == 7
    assert response.context["selected"] == ""


def test_a_queue_can_be_singled_out(admin_user: User, other_queue, history) -> None:
    response = logged_in(admin_user).get("/dashboard/?queue=payments&days=3")
    assert (response.context["selected"], response.context["days"]) == ("payments", 3)


# --- /metrics ------------------------------------------------------------------------------------------------------


def test_metrics_without_credentials_asks_for_them(client: Client, db) -> None:
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_metrics_refuses_a_signed_in_non_staff_user(supervisor: User) -> None:
    assert logged_in(supervisor).get("/metrics").status_code == 403


def test_metrics_for_a_staff_session(admin_user: User, history) -> None:
    response = logged_in(admin_user).get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert (
        'reviewhub_requests_closed_total{outcome="expired",queue="payments"} 1.0' in response.content.decode()
    )


def test_metrics_speak_openmetrics_to_a_scraper_that_asks_for_it(admin_user: User, history) -> None:
    response = logged_in(admin_user).get(
        "/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0"
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response.content.decode().endswith("# EOF\n")


def test_metrics_with_the_configured_token(client: Client, settings, history) -> None:
    settings.METRICS_TOKEN = "scrape-me-7c1f"
    good = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-7c1f")
    bad = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me-0000")
    assert good.status_code == 200
    assert b"reviewhub_queue_open_requests" in good.content
    assert bad.status_code == 401


def test_no_token_is_accepted_when_none_is_configured(client: Client, settings, db) -> None:
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 401


# --- charts --------------------------------------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script>&'


def test_chart_labels_are_escaped() -> None:
    start = datetime(2026, 1, 5, tzinfo=UTC)
    rendered = [
        charts.line_chart(HOSTILE, [start, start + timedelta(hours=1)], [charts.Series(HOSTILE, [3])]),
        charts.stacked_bars(HOSTILE, [HOSTILE], [charts.Series(HOSTILE, [2])]),
        charts.stacked_bars(HOSTILE, [HOSTILE], [charts.Series(HOSTILE, [2])], horizontal=False),
        charts.percentile_chart(HOSTILE, [charts.Spread(HOSTILE, 1.0, 2.0, 3)]),
        charts.empty_chart(HOSTILE, HOSTILE),
    ]
    for svg in rendered:
        assert "<script" not in svg
        assert "&lt;script&gt;" in svg
        assert svg.startswith("<svg ") and svg.endswith("</svg>")


def test_charts_without_data_say_so() -> None:
    assert "No data in this period." in charts.stacked_bars("t", ["a"], [charts.Series("s", [0])])
    assert "No data in this period." in charts.percentile_chart("t", [charts.Spread("q", None, None, 0)])


@pytest.mark.parametrize(
    ("maximum", "expected"),
    [(10, [0, 5, 10]), (257, [0, 100, 200, 300]), (25, [0, 10, 20, 30]), (3, [0, 1, 2, 3]), (0, [0, 1])],
)
def test_axis_ticks_are_round(maximum: float, expected: list[float]) -> None:
    assert charts.ticks(maximum) == expected


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "-"), (42, "42 s"), (90, "1.5 min"), (1500, "25 min"), (5400, "1.5 h")]
)
def test_durations_read_naturally(seconds: float | None, text: str) -> None:
    assert charts.format_duration(seconds) == text
