"""Dashboard and queue pages: membership, counts, review order, filters and keyset paging."""

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from elicitation.models import ElicitationRequest, Status
from elicitation.queue import selectors, transitions
from elicitation.reviewer import views

pytestmark = pytest.mark.django_db


def row_ids(html: str) -> list[str]:
    return re.findall(r'<tr class="request-row[^"]*" data-id="([^"]+)"', html)


def test_anonymous_visitors_are_sent_to_the_login_page(client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"
    assert client.get("/accounts/login/").status_code == 200


def test_the_dashboard_lists_only_member_queues_with_their_counts(
    login, make_reviewer, make_request, queue, other_queue, clock
) -> None:
    alice = make_reviewer("alice", queue)
    oldest = make_request(priority=1)
    claimed = make_request()
    transitions.claim_request(claimed.pk, user=alice)
    make_request(expires_in=30)
    clock.advance(seconds=60)
    response = login(alice).get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-queue="payments"' in html
    assert 'data-queue="other"' not in html
    row = html[html.index('data-queue="payments"') :]
    assert re.search(r'data-count="pending">2<', row)
    assert re.search(r'data-count="claimed">1<', row)
    assert re.search(r'badge-danger">1<', row)  # the overdue one
    assert f'data-age="{oldest.created_at.isoformat()}"' in row  # oldest waiting


def test_the_queue_page_is_forbidden_to_non_members(login, make_reviewer, queue, other_queue) -> None:
    outsider = make_reviewer("mallory", other_queue)
    assert login(outsider).get(f"/queues/{queue.slug}/").status_code == 403
    assert login(outsider).post(f"/queues/{queue.slug}/next").status_code == 403
    assert login(outsider).get("/queues/no-such-queue/").status_code == 404


def test_the_queue_lists_open_requests_by_priority_then_age(
    login, reviewer, make_request, queue, clock
) -> None:
    old = make_request(message="old")
    clock.advance(seconds=1)
    urgent = make_request(message="urgent", priority=9)
    clock.advance(seconds=1)
    new = make_request(message="new")
    closed = make_request(message="closed")
    transitions.claim_request(closed.pk, user=reviewer)
    transitions.respond(closed.pk, user=reviewer, action="decline")
    html = login(reviewer).get(f"/queues/{queue.slug}/").content.decode()
    assert row_ids(html) == [str(urgent.pk), str(old.pk), str(new.pk)]


def test_the_queue_shows_who_holds_a_claim_and_filters_by_status_and_agent(
    login, make_reviewer, make_request, make_agent, queue
) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    pending = make_request()
    held = make_request()
    transitions.claim_request(held.pk, user=bob)
    other_agent, _ = make_agent("other-bot", queue)
    theirs = make_request(agent=other_agent)
    client = login(alice)
    html = client.get(f"/queues/{queue.slug}/").content.decode()
    assert "claimed by bob" in html
    assert row_ids(client.get(f"/queues/{queue.slug}/?status=claimed").content.decode()) == [str(held.pk)]
    assert row_ids(client.get(f"/queues/{queue.slug}/?status=pending").content.decode()) == [
        str(pending.pk),
        str(theirs.pk),
    ]
    by_agent = client.get(f"/queues/{queue.slug}/?agent={other_agent.pk}").content.decode()
    assert row_ids(by_agent) == [str(theirs.pk)]
    assert row_ids(client.get(f"/queues/{queue.slug}/?status=bogus&agent=x").content.decode()) == [
        str(pending.pk),
        str(held.pk),
        str(theirs.pk),
    ]


def test_keyset_pages_cover_every_row_once_in_order_and_page_back(
    login, reviewer, make_request, queue, clock, monkeypatch
) -> None:
    monkeypatch.setattr(views, "PAGE_SIZE", 4)
    made = []
    for index in range(11):
        made.append(make_request(message=f"r{index}", priority=index % 3))
        clock.advance(seconds=1)
    transitions.claim_request(made[4].pk, user=reviewer)
    expected = [str(r.pk) for r in sorted(made, key=lambda r: (-r.priority, r.created_at))]
    client = login(reviewer)
    seen: list[str] = []
    pages = []
    url = f"/queues/{queue.slug}/"
    while url:
        html = client.get(url).content.decode()
        pages.append(html)
        seen += row_ids(html)
        found = re.search(r'href="(\?[^"]*after=[^"]+)" rel="next"', html)
        url = f"/queues/{queue.slug}/" + found.group(1).replace("&amp;", "&") if found else ""
    assert seen == expected
    assert len(pages) == 3
    back = re.search(r'href="(\?[^"]*before=[^"]+)" rel="prev"', pages[2])
    assert back is not None
    previous = client.get(f"/queues/{queue.slug}/" + back.group(1).replace("&amp;", "&")).content.decode()
    assert row_ids(previous) == expected[4:8]


def test_a_cursor_that_no_longer_matches_anything_starts_over(login, reviewer, make_request, queue) -> None:
    only = make_request()
    client = login(reviewer)
    cursor = selectors.QueueCursor(priority=-1000, created_at=only.created_at, id=only.pk).encode()
    assert row_ids(client.get(f"/queues/{queue.slug}/", {"after": cursor}).content.decode()) == [str(only.pk)]
    assert row_ids(client.get(f"/queues/{queue.slug}/", {"after": "garbage"}).content.decode()) == [
        str(only.pk)
    ]


def test_queue_paging_seeks_on_the_index_without_offset_or_a_full_sort(
    login, reviewer, make_request, queue
) -> None:
    rows = [make_request(priority=index % 2) for index in range(6)]
    # Enough rows for the planner's statistics to matter (a join-first plan sorts the whole queue).
    template = rows[0]
    ElicitationRequest.objects.bulk_create(
        ElicitationRequest(
            queue=queue,
            agent=template.agent,
            message="bulk",
            requested_schema=template.requested_schema,
            deadline=template.deadline,
            priority=index % 3,
        )
        for index in range(3000)
    )
    with connection.cursor() as cursor_:
        cursor_.execute(
            "ANALYZE" if connection.vendor == "sqlite" else "ANALYZE elicitation_elicitationrequest"
        )
    client = login(reviewer)
    for params in (
        {},
        {"after": selectors.QueueCursor.of(rows[2]).encode()},
        {"before": selectors.QueueCursor.of(rows[3]).encode()},
    ):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/queues/{queue.slug}/", params).status_code == 200
        seeks = [
            q["sql"]
            for q in queries.captured_queries
            if 'FROM "elicitation_elicitationrequest"' in q["sql"] and "ORDER BY" in q["sql"]
        ]
        assert seeks and not any("OFFSET" in sql for sql in seeks)
        if connection.vendor != "sqlite":
            continue
        for sql in seeks:
            with connection.cursor() as cursor_:
                plan = " | ".join(row[3] for row in cursor_.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
            assert "USING INDEX request_queue_order" in plan, plan
            assert "TEMP B-TREE FOR ORDER BY" not in plan, plan  # only the id tie-break may be sorted


def test_next_claims_the_most_urgent_request_and_opens_it(login, reviewer, make_request, queue) -> None:
    make_request(priority=1)
    urgent = make_request(priority=5)
    response = login(reviewer).post(f"/queues/{queue.slug}/next")
    assert response.status_code == 302
    assert response["Location"] == f"/requests/{urgent.pk}/"
    urgent.refresh_from_db()
    assert urgent.status == Status.CLAIMED and urgent.claimed_by == reviewer


def test_next_on_an_empty_queue_says_so(login, reviewer, queue) -> None:
    client = login(reviewer)
    response = client.post(f"/queues/{queue.slug}/next", follow=True)
    assert response.redirect_chain == [(f"/queues/{queue.slug}/", 302)]
    assert "Nothing is waiting in this queue." in response.content.decode()


def test_next_skips_requests_past_their_deadline(login, reviewer, make_request, queue, clock) -> None:
    make_request(expires_in=5, priority=9)
    fresh = make_request()
    clock.advance(seconds=10)
    response = login(reviewer).post(f"/queues/{queue.slug}/next")
    assert response["Location"] == f"/requests/{fresh.pk}/"


def test_the_counts_endpoint_serves_members_only(
    login, make_reviewer, make_request, queue, other_queue
) -> None:
    alice = make_reviewer("alice", queue)
    make_request()
    claimed = make_request()
    transitions.claim_request(claimed.pk, user=alice)
    response = login(alice).get(f"/queues/{queue.slug}/counts")
    assert response.json() == {"pending": "1", "claimed": "1", "overdue": "0"}
    assert login(make_reviewer("mallory", other_queue)).get(f"/queues/{queue.slug}/counts").status_code == 403


def test_queue_counts_stop_at_the_cap_and_say_so(
    login, make_reviewer, make_request, queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "COUNT_CAP", 3)
    alice = make_reviewer("alice", queue)
    for _ in range(5):
        make_request()
    claimed = make_request()
    transitions.claim_request(claimed.pk, user=alice)

    counts = selectors.queue_counts(queue)
    page = login(alice).get(f"/queues/{queue.slug}/")

    assert (counts.pending, counts.claimed) == (4, 1)  # counted to the cap + 1, no further
    assert login(alice).get(f"/queues/{queue.slug}/counts").json() == {
        "pending": "3+",
        "claimed": "1",
        "overdue": "0",
    }
    assert re.search(r'data-count="pending">3\+</strong>', page.content.decode())


def test_each_queue_count_reads_at_most_the_cap_of_rows(make_request, queue) -> None:
    make_request()
    with CaptureQueriesContext(connection) as queries:
        selectors.queue_counts(queue)

    counts = [q["sql"] for q in queries.captured_queries]
    assert len(counts) == 3
    assert all(f"LIMIT {selectors.COUNT_CAP + 1}" in sql for sql in counts), counts


def test_the_top_bar_links_metrics_for_supervisors_and_staff_and_admin_for_staff_only(
    login, make_reviewer, queue
) -> None:
    member = make_reviewer("alice", queue)
    supervisor = make_reviewer("sam", queue)
    queue.supervisors.add(supervisor)
    staff = make_reviewer("olga", queue)
    staff.is_staff = True
    staff.save()

    def links(user: Any) -> set[str]:
        html = login(user).get("/").content.decode()
        nav = html[html.index('<nav class="topnav"') : html.index("</nav>")]
        return set(re.findall(r'href="([^"]+)"', nav))

    assert links(member) == {"/", "/history/"}
    assert links(supervisor) == {"/", "/history/", "/dashboard/"}
    assert links(staff) == {"/", "/history/", "/dashboard/", "/admin/"}
