"""A reviewer sets their own quiet hours in the browser, and routing respects them: a request arriving during those
hours, read in the reviewer's time zone, does not e-mail them while a colleague who is awake is e-mailed."""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, time
from time import monotonic, sleep
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from playwright.sync_api import expect

from elicitation.delivery import background
from elicitation.models import Channel, Notice, NoticeStatus, Queue, ReachRule, ReviewerReach
from elicitation.queue import accounts, transitions
from reviewhub import celery_app

pytestmark = pytest.mark.browser

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "OK?"}}}


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Reach's tasks run in this process when the request is created (the PostgreSQL leg has no worker)."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def make_member(queue: Queue, name: str) -> User:
    user = User.objects.create_user(name, password="pw-" + name, email=f"{name}@example.com")
    queue.members.add(user)
    return user


def wait_for_background_senders() -> None:
    """Notices leave after commit from the background senders, never on the agent's request path: wait for them
    (the bound is a safety net, not a deadline)."""
    give_up = monotonic() + 120
    while background.unfinished() and monotonic() < give_up:
        sleep(0.05)


def test_quiet_hours_set_in_the_browser_keep_arrival_email_away(
    asgi_live_server_url: str,
    open_page: Callable[..., Any],
    screenshot: Callable[[Any, str], Any],
    clock: Any,
    eager_celery: None,
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments")
    asleep = make_member(queue, "alice")
    awake = make_member(queue, "bob")
    ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")

    page = open_page(asleep, "/")
    # The way there: the top bar's Settings menu.
    page.get_by_text("Settings", exact=True).click()
    page.get_by_role("link", name="Notifications, quiet hours and Slack…").click()
    expect(page).to_have_title("Preferences · ReviewHub")

    page.get_by_label("Time zone").fill("Asia/Tokyo")
    page.get_by_label("Quiet from").fill("22:00")
    page.get_by_label("Quiet until").fill("07:00")
    page.get_by_label("An e-mail per request").check()
    page.get_by_role("button", name="Save preferences").click()
    expect(page.get_by_role("status")).to_contain_text("Your preferences are saved.")
    expect(page.get_by_label("Time zone")).to_have_value("Asia/Tokyo")
    expect(page.get_by_label("Quiet from")).to_have_value("22:00")
    expect(page.get_by_label("Quiet until")).to_have_value("07:00")
    screenshot(page, "preferences-saved")

    prefs = ReviewerReach.objects.get(user=asleep)
    assert (prefs.time_zone, prefs.quiet_start, prefs.quiet_end) == ("Asia/Tokyo", time(22), time(7))
    assert not ReviewerReach.objects.filter(user=awake).exists()

    # 16:00 UTC is 01:00 in Tokyo: alice is asleep; bob (no preferences: UTC, no quiet hours) is not.
    clock.current = datetime(2026, 1, 15, 16, 0, tzinfo=UTC)
    agent, _ = accounts.create_agent("agent-a", queue_slugs=["payments"])
    request, _ = transitions.create_request(
        agent=agent,
        queue_slug="payments",
        message="Approve transfer of 100 EUR?",
        mode="form",
        requested_schema=SCHEMA,
    )
    wait_for_background_senders()
    notices = {n.user.username: n for n in Notice.objects.filter(request=request).select_related("user")}
    assert (notices["alice"].status, notices["alice"].reason) == (NoticeStatus.SKIPPED, "quiet hours")
    assert notices["bob"].status == NoticeStatus.SENT
    assert [message.to for message in mail.outbox] == [["bob@example.com"]]

    # Later that day (12:00 in Tokyo) a new request e-mails her too.
    clock.current = datetime(2026, 1, 15, 3, 0, tzinfo=UTC)
    mail.outbox.clear()
    later, _ = transitions.create_request(
        agent=agent,
        queue_slug="payments",
        message="Approve transfer of 200 EUR?",
        mode="form",
        requested_schema=SCHEMA,
    )
    wait_for_background_senders()
    assert sorted(message.to[0] for message in mail.outbox) == ["alice@example.com", "bob@example.com"]
    assert Notice.objects.get(request=later, user=asleep).status == NoticeStatus.SENT


def test_a_bad_time_zone_is_shown_on_its_field_and_nothing_is_saved(
    asgi_live_server_url: str, open_page: Callable[..., Any], screenshot: Callable[[Any, str], Any]
) -> None:
    user = User.objects.create_user("carol", password="pw-carol")
    page = open_page(user, "/preferences/")
    page.get_by_label("Time zone").fill("Mars/Olympus_Mons")
    page.get_by_role("button", name="Save preferences").click()
    field = page.get_by_label("Time zone")
    expect(field).to_have_attribute("aria-invalid", "true")
    error = page.locator("#id_time_zone_error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("Not a time zone we know")
    assert "id_time_zone_error" in (field.get_attribute("aria-describedby") or "").split()
    # The summary's link takes the keyboard to the field.
    page.get_by_role("link", name="Time zone: Not a time zone we know", exact=False).click()
    expect(field).to_be_focused()
    screenshot(page, "preferences-error")
    assert not ReviewerReach.objects.filter(user=user).exists()


def test_desktop_notifications_can_be_turned_off_for_this_browser(
    asgi_live_server_url: str, open_page: Callable[..., Any]
) -> None:
    user = User.objects.create_user("dave", password="pw-dave")
    page = open_page(user, "")
    page.context.grant_permissions(["notifications"], origin=asgi_live_server_url)
    page.goto("/preferences/")
    toggle = page.get_by_label("Desktop notifications about new requests", exact=False)
    expect(toggle).to_be_checked()
    expect(page.locator("#notify-permission")).to_have_text("On: allowed by this browser.")
    toggle.uncheck()
    expect(page.locator("#notify-permission")).to_have_text("Off.")
    assert page.evaluate("window.localStorage.getItem('reviewhub.notify')") == "off"
    page.reload()
    expect(page.get_by_label("Desktop notifications about new requests", exact=False)).not_to_be_checked()
