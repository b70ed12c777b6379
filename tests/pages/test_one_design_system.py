"""Pages outside the reviewer workspace wear the same layout: hosted flows, the OAuth consent page, metrics; the
consent page tells an unverified client from an operator's; ReviewHub's own flow link is shown as ReviewHub's;
the metrics page says one name, draws zero as zero and shows the expected wait beside each queue's backlog."""

import json
import re
from typing import Any
from uuid import uuid4

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from oauth2_provider.models import get_application_model

from elicitation.flows import hosted_flows
from elicitation.models import ElicitationRequest, Queue
from elicitation.ops import charts
from elicitation.queue import accounts, expected_wait, transitions
from elicitation.reviewer import presenters

REDIRECT = "http://127.0.0.1:53682/callback"


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- ReviewHub's own flow link --------------------------------------------------------------------------------------


def test_reviewhubs_own_flow_url_carries_no_warning_even_on_plain_http_and_a_numeric_host(
    settings: Any,
) -> None:
    settings.PUBLIC_URL = "http://127.0.0.1:8000"
    view = presenters.url_view(hosted_flows.flow_url(uuid4()))
    assert view.hosted_by_reviewhub
    assert view.warnings == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/flows/{id}/",  # another port: another origin
        "http://127.0.0.1:8000/flows/{id}/extra/",
        "http://127.0.0.1:8000/flows/{{{id}}}/",  # a UUID spelling flow_url never writes
        "http://127.0.0.1:8000@evil.example/flows/{id}/",
    ],
)
def test_a_look_alike_of_a_flow_url_is_another_site_and_keeps_its_warnings(settings: Any, url: str) -> None:
    settings.PUBLIC_URL = "http://127.0.0.1:8000"
    view = presenters.url_view(url.format(id=uuid4()))
    assert not view.hosted_by_reviewhub
    assert any("not HTTPS" in warning for warning in view.warnings) and len(view.warnings) >= 1


# --- hosted flow pages --------------------------------------------------------------------------------------------


def test_the_flow_page_wears_the_site_header_and_stylesheet_and_still_runs_no_script(
    reviewer: User, agent: Any, queue: Queue
) -> None:
    client = logged_in(reviewer)
    response = client.get(f"/flows/{uuid4()}/")  # no such flow: the flow's own error page
    html = response.content.decode()
    assert response.status_code == 404
    assert 'class="topbar"' in html and "/static/reviewhub/reviewhub.css" in html
    assert "/static/reviewhub/flow.css" in html
    assert "<script" not in html and 'rel="manifest"' not in html
    assert '<meta name="referrer" content="no-referrer">' in html


# --- the OAuth consent page -----------------------------------------------------------------------------------------


def consent_page(client: Client, client_id: str) -> str:
    response = client.get(
        "/oauth/authorize/",
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "state": "s",
            "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "code_challenge_method": "S256",
            "resource": settings.MCP_RESOURCE_URL,
            "scope": "mcp",
        },
    )
    assert response.status_code == 200, response.content
    return response.content.decode()


def registered_client(name: str) -> str:
    response = Client().post(
        "/oauth/register/",
        json.dumps(
            {
                "client_name": name,
                "redirect_uris": [REDIRECT],
                "grant_types": ["authorization_code"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }
        ),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return str(response.json()["client_id"])


@pytest.fixture
def supervisor(make_reviewer: Any, queue: Queue) -> User:
    accounts.create_agent("deploy-bot", queue_slugs=[queue.slug])
    return make_reviewer("sam", queue, supervisor=True)


def test_a_self_registered_client_is_marked_unverified_and_its_name_is_not_the_heading(
    supervisor: User,
) -> None:
    html = consent_page(logged_in(supervisor), registered_client("Your Bank"))
    heading = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert heading is not None and "Your Bank" not in heading.group(1)
    assert "Unverified host" in html and "Anyone can register this name" in html
    assert "Your Bank" in html


def test_a_client_an_operator_created_is_not_marked_unverified(supervisor: User) -> None:
    application = get_application_model().objects.create(
        name="Team Claude",
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris=REDIRECT,
    )
    html = consent_page(logged_in(supervisor), application.client_id)
    assert "Set up by an administrator" in html and "Unverified host" not in html


def test_a_sole_queue_starts_checked_and_one_of_two_does_not(supervisor: User, queue: Queue) -> None:
    client = logged_in(supervisor)
    client_id = registered_client("Host")
    checked = re.compile(r'<input type="checkbox" name="queues" value="payments"[^>]*\bchecked\b')
    assert checked.search(consent_page(client, client_id))

    other = Queue.objects.create(slug="refunds", name="Refunds")
    other.supervisors.add(supervisor)
    assert not checked.search(consent_page(client, client_id))


def test_the_consent_page_escapes_a_hostile_client_name(supervisor: User) -> None:
    html = consent_page(logged_in(supervisor), registered_client('<img src=x onerror="alert(1)">'))
    assert "<img src=x" not in html and "&lt;img src=x" in html


# --- metrics ------------------------------------------------------------------------------------------------------


def test_the_metrics_page_and_its_link_say_the_same_name(supervisor: User) -> None:
    html = logged_in(supervisor).get("/dashboard/").content.decode()
    assert "<h1>Metrics</h1>" in html and "<title>Metrics · ReviewHub</title>" in html
    assert 'aria-current="page">Metrics</a>' in html
    assert "Operations" not in html


def test_a_zero_duration_draws_no_bar_and_a_sub_second_one_no_wide_bar() -> None:
    zero = charts.percentile_chart("t", [charts.Spread("payments", 0.0, 0.0, 3)], width=720)
    assert "<rect" not in zero.split("</desc>", 1)[1].split('<text class="category"', 1)[1]
    quick = charts.percentile_chart("t", [charts.Spread("payments", 0.2, 0.4, 3)], width=720)
    widths = [float(w) for w in re.findall(r'width="([\d.]+)"[^>]*><title>payments p', quick)]
    assert len(widths) == 2 and max(widths) <= 0.05 * 440  # a sliver of the 440-unit plot, not all of it
    assert "&lt;1 s" in quick


def test_a_phone_sized_chart_puts_labels_above_bars() -> None:
    svg = charts.percentile_chart("t", [charts.Spread("payments answered", 30.0, 90.0, 3)], width=360)
    assert '<text class="category" x="8"' in svg and 'viewBox="0 0 360' in svg


def test_a_name_longer_than_the_side_column_goes_above_its_bar_whole_or_cut_with_its_tooltip() -> None:
    escalated = "security → security-oncall claimed"
    rows = [charts.Spread("payments claimed", 60.0, 120.0, 3), charts.Spread(escalated, 30.0, 90.0, 3)]

    desktop = charts.percentile_chart("t", rows, width=720)
    phone = charts.percentile_chart("t", rows, width=360)

    desktop_names = re.findall(r'<text class="category" x="8"[^>]*>([^<]*)<', desktop)
    assert desktop_names == ["payments claimed", escalated]  # every row stacked, no name cut
    cut = re.search(r'<text class="category" x="8"[^>]*>([^<]*)<title>([^<]*)</title>', phone)
    assert cut is not None and cut.group(1).endswith("…") and cut.group(2) == escalated
    assert escalated.startswith(cut.group(1)[:-1])


def test_the_backlog_shows_each_queues_expected_wait(
    supervisor: User, queue: Queue, make_request: Any, reviewer: User, clock: Any
) -> None:
    for _ in range(6):  # enough answers for the model (expected_wait.MIN_SERVICE_SAMPLES)
        request = make_request()
        ElicitationRequest.objects.filter(pk=request.pk).update(created_at=clock.current)
        clock.advance(seconds=10)
        transitions.claim_request(request.pk, user=reviewer)
        clock.advance(seconds=30)
        transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    make_request()
    expected_wait.forget_snapshots()

    response = logged_in(supervisor).get("/dashboard/")
    [row] = response.context["backlog"]
    assert row.now.pending == 1 and row.expected_wait is not None
    assert f'data-expected-wait="{row.expected_wait}"' in response.content.decode()

    staff = User.objects.create_user("ops", is_staff=True)
    scrape = logged_in(staff).get("/metrics").content.decode()
    assert re.search(r'reviewhub_queue_expected_wait_seconds\{queue="payments"\} \d', scrape)


def test_a_queue_without_history_has_no_estimate_and_no_sample(supervisor: User, queue: Queue) -> None:
    expected_wait.forget_snapshots()
    response = logged_in(supervisor).get("/dashboard/")
    [row] = response.context["backlog"]
    assert row.expected_wait is None and "no estimate" in response.content.decode()
    staff = User.objects.create_user("ops", is_staff=True)
    assert (
        'reviewhub_queue_expected_wait_seconds{queue="payments"}'
        not in logged_in(staff).get("/metrics").content.decode()
    )
