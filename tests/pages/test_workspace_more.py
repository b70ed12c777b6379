"""The reviewer workspace, more: history days in the reviewer's own time zone, take over confirmed in a dialog
(rendered open without JavaScript), the split view's list beside the request, and the top bar's search box."""

from datetime import UTC, datetime

import pytest
from django.db import connection

from elicitation.models import ElicitationRequest, ReviewerReach
from elicitation.queue import selectors, transitions
from tests.answers import answer_of

pytestmark = pytest.mark.django_db

# 04:30 UTC on 16 January is 23:30 on the 15th in New York (UTC-5) and 13:30 on the 16th in Tokyo (UTC+9).
ASKED = datetime(2026, 1, 16, 4, 30, tzinfo=UTC)


def history_ids(client, query: str) -> list[str]:
    response = client.get(f"/history/?{query}")
    assert response.status_code == 200
    html = response.content.decode()
    return [part.split('"')[0] for part in html.split('class="request-row" data-id="')[1:]]


@pytest.fixture
def late_request(make_request) -> ElicitationRequest:
    request = make_request(message="Late night transfer")
    ElicitationRequest.objects.filter(pk=request.pk).update(created_at=ASKED)
    return request


def test_history_days_are_utc_days_when_no_zone_is_known(login, reviewer, late_request) -> None:
    client = login(reviewer)
    assert history_ids(client, "since=2026-01-16&until=2026-01-16") == [str(late_request.pk)]
    assert history_ids(client, "since=2026-01-15&until=2026-01-15") == []
    dated = client.get("/history/?since=2026-01-16").content.decode()
    assert 'Dates are days in <span id="history-zone">UTC</span>' in dated
    assert "Dates are days in" not in client.get("/history/?q=late").content.decode()


def test_a_request_at_2330_local_is_found_under_that_local_day_in_the_saved_zone(
    login, reviewer, late_request
) -> None:
    ReviewerReach.objects.create(user=reviewer, time_zone="America/New_York")
    client = login(reviewer)
    assert history_ids(client, "since=2026-01-15&until=2026-01-15") == [str(late_request.pk)]
    assert history_ids(client, "until=2026-01-15") == [str(late_request.pk)]
    assert history_ids(client, "since=2026-01-16") == []
    assert "America/New_York" in client.get("/history/?until=2026-01-15").content.decode()


def test_the_browser_zone_counts_when_none_is_saved_and_a_saved_zone_wins_over_it(
    login, reviewer, late_request
) -> None:
    client = login(reviewer)
    assert history_ids(client, "tz=America/New_York&since=2026-01-15&until=2026-01-15") == [
        str(late_request.pk)
    ]
    # A saved "UTC" is the model's default (e.g. a Slack link made the row): the browser's zone still counts.
    ReviewerReach.objects.create(user=reviewer, time_zone="UTC")
    assert history_ids(client, "tz=America/New_York&until=2026-01-15") == [str(late_request.pk)]
    ReviewerReach.objects.filter(user=reviewer).update(time_zone="Asia/Tokyo")
    assert history_ids(client, "tz=America/New_York&since=2026-01-15&until=2026-01-15") == []
    assert history_ids(client, "tz=America/New_York&since=2026-01-16&until=2026-01-16") == [
        str(late_request.pk)
    ]


@pytest.mark.parametrize("zone", ["Not/AZone", "../../etc/passwd", "x" * 300, "", "\x00"])
def test_a_bad_browser_zone_falls_back_to_utc_never_a_500(login, reviewer, late_request, zone) -> None:
    client = login(reviewer)
    response = client.get("/history/", {"tz": zone, "since": "2026-01-16", "until": "2026-01-16"})
    assert response.status_code == 200
    assert f'data-id="{late_request.pk}"' in response.content.decode()


def test_take_over_is_a_dialog_rendered_open_only_when_asked_without_javascript(
    login, make_reviewer, make_request, queue
) -> None:
    alice = make_reviewer("alice", queue)
    sam = make_reviewer("sam", queue, supervisor=True)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    client = login(sam)
    closed = client.get(f"/requests/{request.pk}/").content.decode()
    assert '<dialog class="takeover-dialog" id="takeover-dialog"' in closed
    assert 'aria-describedby="takeover-text">' in closed  # not rendered open
    assert '<details class="takeover' not in closed
    opened = client.get(f"/requests/{request.pk}/?takeover=1").content.decode()
    assert 'aria-describedby="takeover-text" open>' in opened
    assert 'id="takeover-holder">alice</strong>' in opened
    # Alice herself (not a supervisor) gets no take-over at all.
    assert "takeover-dialog" not in login(alice).get(f"/requests/{request.pk}/?takeover=1").content.decode()
    # Confirming takes over; the posted form is the dialog's.
    response = client.post(f"/requests/{request.pk}/", {"action": "takeover"})
    assert response.status_code == 302
    assert ElicitationRequest.objects.get(pk=request.pk).claimed_by == sam


def test_the_split_views_list_shows_the_queues_pending_requests_and_marks_the_open_one(
    login, make_reviewer, make_request, queue, other_queue, agent
) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    first = make_request(message="First <script>alert(1)</script>")
    second = make_request(message="Second one")
    held = make_request(message="Held by bob")
    transitions.claim_request(held.pk, user=bob)
    other_queue.agents.add(agent)
    make_request(message="Other queue", queue_slug=other_queue.slug)
    html = login(alice).get(f"/requests/{second.pk}/").content.decode()
    rail = html.split('id="queue-rail"', 1)[1].split("</nav>", 1)[0]
    assert "First &lt;script&gt;" in rail and "<script>alert" not in rail
    assert rail.index(f'/requests/{first.pk}/"') < rail.index(f'/requests/{second.pk}/"')
    assert f'href="/requests/{second.pk}/" aria-current="page"' in rail
    assert "Held by bob" not in rail and "Other queue" not in rail


def test_the_top_bar_searches_history(login, reviewer) -> None:
    html = login(reviewer).get("/").content.decode()
    form = html.split('class="topbar-search"', 1)[1].split("</form>", 1)[0]
    assert 'action="/history/"' in html.split('class="topbar-search"', 1)[0][-80:]
    assert 'name="q"' in form and '<label for="topbar-q"' in form


@pytest.mark.parametrize(
    ("word", "expected_every"),
    [("alpha", 1), ("beta", 4), ("gamma", None)],
    ids=["common-word-read-newest-first", "medium-word-wider-read", "rare-word-through-the-index"],
)
def test_history_search_pages_through_every_match_newest_first_whichever_path_finds_them(
    reviewer, make_request, monkeypatch, word, expected_every
) -> None:
    """On PostgreSQL a common word is found by reading the newest rows, a rare one through the GIN index (the
    probe's share of matches decides); small limits here make each path run. SQLite runs its own fallback."""
    monkeypatch.setattr(selectors, "SEARCH_PROBE_ROWS", 8)
    monkeypatch.setattr(selectors, "SEARCH_WALK_MAX_ROWS", 40)
    made = []
    for number in range(40):
        words = ["alpha"] + (["beta"] if number % 4 == 0 else []) + (["gamma"] if number == 7 else [])
        made.append(make_request(message=f"Request {number}: {' '.join(words)}"))
    matching = [r for n, r in enumerate(made) if (n % expected_every == 0 if expected_every else n == 7)]
    expected = [str(r.pk) for r in sorted(matching, key=lambda r: (r.created_at, r.pk), reverse=True)]
    reads: list[int] = []
    walk = selectors._walk_newest
    monkeypatch.setattr(
        selectors,
        "_walk_newest",
        lambda rows, query, window: reads.append(window) or walk(rows, query, window),
    )
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        page = selectors.history_page(reviewer, selectors.HistoryFilters(text=word), after=cursor, size=5)
        seen += [str(row.pk) for row in page.rows]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == expected
    if connection.vendor == "postgresql":
        if word == "alpha":
            assert set(reads) == {8}  # every page filled by the probe of the newest rows
        elif word == "beta":
            assert reads[:2] == [8, 36]  # 2 of 8 matched: 1.5 times the rows 6 matches need
        else:
            assert reads == [8]  # none of 8 matched: the GIN index found it


def test_answering_inline_renders_the_next_request_claimed_and_without_script_it_redirects(
    login, reviewer, make_request
) -> None:
    first, second, third = make_request(), make_request(), make_request()
    client = login(reviewer)
    answer = {"action": "accept", "answer-approve": "true", "then": "next", "inline": "1"}
    response = client.post(f"/requests/{first.pk}/", answer)
    # No redirect round trip: the response is the next request's page, held by the reviewer, with its own URL
    # for request.js to put in the address bar.
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    html = response.content.decode()
    assert f'data-request-id="{second.pk}"' in html and f'data-url="/requests/{second.pk}/"' in html
    assert 'data-mine="true"' in html and "This is the next request." in html
    assert ElicitationRequest.objects.get(pk=second.pk).claimed_by == reviewer
    assert answer_of(ElicitationRequest.objects.get(pk=first.pk).result()) == {
        "action": "accept",
        "content": {"approve": True},
    }
    assert list(second.events.values_list("kind", flat=True)) == ["created", "claimed", "viewed"]
    # The flash was shown once, in this page; it does not come back on the next one.
    assert "This is the next request." not in client.get(f"/requests/{second.pk}/").content.decode()
    # Without inline (no script) it is the redirect, as before.
    response = client.post(f"/requests/{second.pk}/", {**answer, "inline": ""})
    assert response.status_code == 302 and response["Location"] == f"/requests/{third.pk}/"
    # Nothing left: inline or not, back to the queue with a redirect.
    response = client.post(f"/requests/{third.pk}/", answer)
    assert response.status_code == 302 and response["Location"].startswith("/queues/")


def test_the_history_page_has_one_search_box_its_own(login, reviewer) -> None:
    html = login(reviewer).get("/history/").content.decode()
    assert 'id="history-q"' in html and 'id="topbar-q"' not in html
