"""One source for open counts: the dashboard, the queue page's header and counts endpoint, the metrics figures and
the reviewer API agree for every combination of roles, and each request is counted once."""

import re
from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from elicitation.models import ElicitationRequest
from elicitation.ops import metrics
from elicitation.queue import access, clock, transitions

pytestmark = pytest.mark.django_db

ROLES = ["member", "supervisor", "member_and_supervisor", "staff", "staff_and_member"]


def dashboard_counts(html: str, slug: str) -> tuple[int, int]:
    row = html[html.index(f'data-queue="{slug}"') :]
    pending = re.search(r'data-count="pending">(\d+)<', row)
    claimed = re.search(r'data-count="claimed">(\d+)<', row)
    assert pending and claimed
    return int(pending.group(1)), int(claimed.group(1))


@pytest.mark.parametrize("role", ROLES)
def test_every_page_counts_the_same_open_requests_once_whatever_the_roles(
    role, login, make_reviewer, make_request, queue
) -> None:
    user = make_reviewer("rita", queue) if "member" in role else make_reviewer("rita")
    if "supervisor" in role:
        queue.supervisors.add(user)
    if "staff" in role:
        user.is_staff = True
        user.save()
    for _ in range(5):
        make_request()
    overdue = make_request()
    holder = make_reviewer("holly", queue)
    transitions.claim_request(make_request().pk, user=holder)
    ElicitationRequest.objects.filter(pk=overdue.pk).update(deadline=clock.now() - timedelta(seconds=1))

    client = login(user)
    dashboard = dashboard_counts(client.get("/").content.decode(), queue.slug)
    header = client.get(f"/queues/{queue.slug}/counts").json()
    page = client.get(f"/queues/{queue.slug}/").content.decode()
    api = APIClient()
    api.force_authenticate(user=user)
    listed = {row["slug"]: row for row in api.get("/api/v1/review/queues").json()}[queue.slug]

    expected = (6, 1)  # five pending plus the overdue one (still pending); one claimed
    assert dashboard == expected
    assert (int(header["pending"]), int(header["claimed"]), int(header["overdue"])) == (6, 1, 1)
    assert '<strong data-count="pending">6</strong>' in page
    assert (listed["pending"], listed["claimed"], listed["overdue"]) == (6, 1, 1)
    if access.can_view_metrics(user):
        [now] = [q for q in metrics.queues_now(access.metrics_queues(user)) if q.queue.pk == queue.pk]
        assert (now.pending, now.claimed, now.overdue) == (6, 1, 1)
    else:
        assert role == "member"
        assert client.get("/dashboard/").status_code in (302, 403)


def test_a_queue_seen_through_two_roles_is_listed_once(login, make_reviewer, queue, make_request) -> None:
    user = make_reviewer("rita", queue)
    queue.supervisors.add(user)
    make_request()
    api = APIClient()
    api.force_authenticate(user=user)
    slugs = [row["slug"] for row in api.get("/api/v1/review/queues").json()]
    assert slugs.count(queue.slug) == 1
    html = login(user).get("/").content.decode()
    assert html.count(f'data-queue="{queue.slug}"') == 1
