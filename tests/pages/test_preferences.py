# ruff: noqa: F811
"""The self-service preferences page: a reviewer reads and changes their own time zone, quiet hours, e-mail mode and
linked Slack account, and nobody else's; bad input is refused on the field it concerns; a Slack account is linked
only when Slack says its confirmed e-mail is the reviewer's own."""

import re
from collections.abc import Callable
from datetime import UTC, datetime, time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from elicitation.models import EmailMode, Queue, ReviewerReach
from elicitation.reviewer import preferences

# The loopback Slack Web API fixture, shared with the reach tests (tests requesting it shadow the import).
from tests.delivery.reach.conftest import FakeSlack, slack_api  # noqa: F401

URL = reverse("preferences")
VALID = {"time_zone": "Europe/Paris", "quiet_start": "22:00", "quiet_end": "07:00", "email_mode": "digest"}


@pytest.fixture
def bob(make_reviewer: Callable[..., User], queue: Queue) -> User:
    user = make_reviewer("bob", queue)
    user.email = "bob@example.com"
    user.save()
    ReviewerReach.objects.create(
        user=user,
        time_zone="Pacific/Auckland",
        quiet_start=time(1, 15),
        quiet_end=time(5, 45),
        email_mode=EmailMode.OFF,
        slack_user_id="UBOB0001",
    )
    return user


def field_error(html: str, field_id: str) -> str:
    """The text of the error paragraph tied to the input `field_id`, checking the input points at it."""
    tag = re.search(rf'<input[^>]*id="{field_id}"[^>]*>', html)
    assert tag, f"no input #{field_id}"
    assert 'aria-describedby="' in tag.group(0) and f"{field_id}_error" in tag.group(0)
    assert 'aria-invalid="true"' in tag.group(0)
    found = re.search(rf'<p class="field-error" id="{field_id}_error">([^<]*)</p>', html)
    assert found, f"no visible error for #{field_id}"
    return found.group(1)


def test_anonymous_is_sent_to_sign_in_and_nothing_is_saved(client: Client, reviewer: User) -> None:
    for response in (client.get(URL), client.post(URL, VALID)):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login") + "?next=")
    assert not ReviewerReach.objects.exists()


def test_get_shows_defaults_and_writes_nothing(login: Callable[[User], Client], reviewer: User) -> None:
    response = login(reviewer).get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="time_zone" value="UTC"' in html
    assert re.search(r'value="each"[^>]*checked', html)
    assert 'id="slack-unlinked"' in html
    assert not ReviewerReach.objects.filter(user=reviewer).exists()


def test_get_shows_my_current_values_and_never_anothers(
    login: Callable[[User], Client], reviewer: User, bob: User
) -> None:
    ReviewerReach.objects.create(
        user=reviewer, time_zone="Asia/Tokyo", quiet_start=time(22), quiet_end=time(7), email_mode="digest"
    )
    html = login(reviewer).get(URL).content.decode()
    assert 'name="time_zone" value="Asia/Tokyo"' in html
    assert 'name="quiet_start" value="22:00"' in html
    assert 'name="quiet_end" value="07:00"' in html
    assert re.search(r'value="digest"[^>]*checked', html)
    # Every zone name is offered in the datalist; the rest of the page must not carry bob's.
    html = re.sub(r"<datalist.*?</datalist>", "", html, flags=re.S)
    for bobs in ("Pacific/Auckland", "01:15", "05:45", "UBOB0001", "bob@example.com"):
        assert bobs not in html


def test_post_saves_my_preferences_and_redirects(login: Callable[[User], Client], reviewer: User) -> None:
    client = login(reviewer)
    response = client.post(URL, VALID)
    assert response.status_code == 302 and response["Location"] == URL
    prefs = ReviewerReach.objects.get(user=reviewer)
    assert (prefs.time_zone, prefs.quiet_start, prefs.quiet_end, prefs.email_mode) == (
        "Europe/Paris",
        time(22),
        time(7),
        "digest",
    )
    assert "Your preferences are saved." in client.get(URL).content.decode()
    # Clearing quiet hours and changing again updates the same row.
    client.post(URL, {**VALID, "quiet_start": "", "quiet_end": "", "email_mode": "off"})
    prefs.refresh_from_db()
    assert (prefs.quiet_start, prefs.quiet_end, prefs.email_mode) == (None, None, "off")
    assert ReviewerReach.objects.filter(user=reviewer).count() == 1


def test_post_keeps_the_linked_slack_account(login: Callable[[User], Client], bob: User) -> None:
    login(bob).post(URL, VALID)
    assert ReviewerReach.objects.get(user=bob).slack_user_id == "UBOB0001"


def test_post_never_changes_another_reviewers_row(
    login: Callable[[User], Client], reviewer: User, bob: User
) -> None:
    before = list(ReviewerReach.objects.filter(user=bob).values())
    response = login(reviewer).post(
        URL, {**VALID, "user": bob.pk, "user_id": bob.pk, "slack_user_id": "UBOB0001", "id": bob.reach.pk}
    )
    assert response.status_code == 302
    assert list(ReviewerReach.objects.filter(user=bob).values()) == before
    mine = ReviewerReach.objects.get(user=reviewer)
    assert mine.pk != bob.reach.pk and mine.slack_user_id is None


@pytest.mark.parametrize(
    "time_zone", ["Mars/Olympus_Mons", "../../etc/passwd", "", "utc ", "Europe/Paris\x00", "x" * 65]
)
def test_an_unknown_time_zone_is_refused_on_its_field(
    login: Callable[[User], Client], reviewer: User, time_zone: str
) -> None:
    response = login(reviewer).post(URL, {**VALID, "time_zone": time_zone})
    assert response.status_code == 400
    html = response.content.decode()
    assert field_error(html, "id_time_zone")
    assert 'href="#id_time_zone"' in html  # the error summary leads to the field
    assert not ReviewerReach.objects.filter(user=reviewer).exists()


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"quiet_end": ""}, "id_quiet_end", "Give both times"),
        ({"quiet_start": ""}, "id_quiet_start", "Give both times"),
        ({"quiet_end": "22:00"}, "id_quiet_end", "same time"),
        ({"quiet_start": "25:61"}, "id_quiet_start", "valid time"),
    ],
)
def test_bad_quiet_hours_are_refused_on_their_field(
    login: Callable[[User], Client], reviewer: User, changes: dict[str, str], field: str, reason: str
) -> None:
    response = login(reviewer).post(URL, {**VALID, **changes})
    assert response.status_code == 400
    assert reason in field_error(response.content.decode(), field)
    assert not ReviewerReach.objects.filter(user=reviewer).exists()


def test_an_unknown_email_mode_is_refused(login: Callable[[User], Client], reviewer: User) -> None:
    response = login(reviewer).post(URL, {**VALID, "email_mode": "carrier-pigeon"})
    assert response.status_code == 400
    html = response.content.decode()
    assert re.search(r'<p class="field-error" id="id_email_mode_error">[^<]*valid choice', html)
    assert 'aria-describedby="id_email_mode_error"' in html


def test_the_form_needs_a_csrf_token(reviewer: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    assert client.post(URL, VALID).status_code == 403
    assert not ReviewerReach.objects.filter(user=reviewer).exists()


def test_put_is_not_a_way_in(login: Callable[[User], Client], reviewer: User) -> None:
    assert login(reviewer).put(URL, VALID).status_code == 405


def test_the_page_shows_when_quiet_hours_hold_messages_now(
    login: Callable[[User], Client], reviewer: User, clock: Any
) -> None:
    ReviewerReach.objects.create(
        user=reviewer, time_zone="Asia/Tokyo", quiet_start=time(22), quiet_end=time(7)
    )
    clock.current = datetime(2026, 1, 15, 16, 0, tzinfo=UTC)  # 01:00 in Tokyo
    html = login(reviewer).get(URL).content.decode()
    assert 'id="quiet-now"' in html and "It is 01:00 there now." in html
    clock.current = datetime(2026, 1, 15, 3, 0, tzinfo=UTC)  # 12:00 in Tokyo
    assert 'id="quiet-now"' not in login(reviewer).get(URL).content.decode()


def test_the_top_bar_links_to_the_page(login: Callable[[User], Client], reviewer: User) -> None:
    html = login(reviewer).get(reverse("dashboard")).content.decode()
    assert f'href="{URL}" id="prefs-link"' in html


def test_no_inline_script_or_style(login: Callable[[User], Client], reviewer: User) -> None:
    html = login(reviewer).get(URL).content.decode()
    assert not re.search(r"<script(?![^>]*\ssrc=)", html)
    assert " style=" not in html and "<style" not in html


# --- Slack -----------------------------------------------------------------------------------------------------


def slack_member(member_id: str, email: str, **extra: Any) -> dict[str, Any]:
    return {"id": member_id, "is_email_confirmed": True, "profile": {"email": email}, **extra}


@pytest.fixture
def alice(reviewer: User) -> User:
    reviewer.email = "alice@example.com"
    reviewer.save()
    return reviewer


def link(client: Client, member_id: str) -> Any:
    return client.post(URL, {"section": "slack-link", "slack-slack_user_id": member_id})


def test_slack_member_is_linked_when_slack_confirms_my_email(
    login: Callable[[User], Client], alice: User, slack_api: FakeSlack
) -> None:
    slack_api.users["UALICE01"] = slack_member("UALICE01", "Alice@Example.com")
    client = login(alice)
    response = link(client, " ualice01 ")
    assert response.status_code == 302
    assert ReviewerReach.objects.get(user=alice).slack_user_id == "UALICE01"
    assert [call.body.get("user") for call in slack_api.named("users.info")] == ["UALICE01"]
    html = client.get(URL).content.decode()
    assert 'id="slack-linked"' in html and "UALICE01" in html
    assert client.post(URL, {"section": "slack-unlink"}).status_code == 302
    assert ReviewerReach.objects.get(user=alice).slack_user_id is None


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (slack_member("UMALLORY", "mallory@example.com"), "not your ReviewHub address"),
        (
            slack_member("UMALLORY", "alice@example.com", is_email_confirmed=False),
            "not your ReviewHub address",
        ),
        (slack_member("UMALLORY", "alice@example.com", deleted=True), "deactivated"),
        (slack_member("UMALLORY", "alice@example.com", is_bot=True), "bot"),
        (None, "no member with this ID"),
    ],
)
def test_a_slack_member_slack_does_not_vouch_for_is_not_linked(
    login: Callable[[User], Client],
    alice: User,
    slack_api: FakeSlack,
    member: dict[str, Any] | None,
    reason: str,
) -> None:
    if member is not None:
        slack_api.users["UMALLORY"] = member
    response = link(login(alice), "UMALLORY")
    assert response.status_code == 400
    assert reason in field_error(response.content.decode(), "id_slack-slack_user_id")
    assert not ReviewerReach.objects.filter(user=alice, slack_user_id__isnull=False).exists()


def test_a_slack_member_linked_to_someone_else_stays_theirs(
    login: Callable[[User], Client], alice: User, bob: User, slack_api: FakeSlack
) -> None:
    # Even with Slack vouching (an admin linked it to bob), alice cannot take it over.
    slack_api.users["UBOB0001"] = slack_member("UBOB0001", "alice@example.com")
    response = link(login(alice), "UBOB0001")
    assert response.status_code == 400
    assert "already linked to another reviewer" in field_error(
        response.content.decode(), "id_slack-slack_user_id"
    )
    assert ReviewerReach.objects.get(slack_user_id="UBOB0001").user == bob


def test_losing_a_race_for_the_same_slack_member_is_a_field_error(
    login: Callable[[User], Client],
    alice: User,
    bob: User,
    slack_api: FakeSlack,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Bob's link lands between alice's check and her write: the unique constraint decides, not a 500.
    monkeypatch.setattr(preferences, "linked_to_someone_else", lambda user, member_id: False)
    slack_api.users["UBOB0001"] = slack_member("UBOB0001", "alice@example.com")
    response = link(login(alice), "UBOB0001")
    assert response.status_code == 400
    assert "already linked" in field_error(response.content.decode(), "id_slack-slack_user_id")
    assert ReviewerReach.objects.get(slack_user_id="UBOB0001").user == bob
    assert not ReviewerReach.objects.filter(user=alice).exists()


@pytest.mark.parametrize("member_id", ["bob", "", "U1", "C0123ABCD", "U" + "A" * 40, "U123<script>"])
def test_a_malformed_member_id_is_refused_without_asking_slack(
    login: Callable[[User], Client], alice: User, slack_api: FakeSlack, member_id: str
) -> None:
    response = link(login(alice), member_id)
    assert response.status_code == 400
    assert field_error(response.content.decode(), "id_slack-slack_user_id")
    assert slack_api.named("users.info") == []


def test_slack_down_is_a_field_error_not_a_crash(
    login: Callable[[User], Client], alice: User, slack_api: FakeSlack
) -> None:
    slack_api.fail_next = 1
    response = link(login(alice), "UALICE01")
    assert response.status_code == 400
    assert "try again" in field_error(response.content.decode(), "id_slack-slack_user_id")


def test_slack_unreachable_is_a_field_error(
    login: Callable[[User], Client], alice: User, settings: Any
) -> None:
    settings.SLACK_BOT_TOKEN = "xoxb-test"
    settings.SLACK_API_URL = "http://127.0.0.1:9/api/"  # discard port: nothing listens
    response = link(login(alice), "UALICE01")
    assert response.status_code == 400
    assert "could not be reached" in field_error(response.content.decode(), "id_slack-slack_user_id")


def test_without_an_email_the_slack_link_is_read_only(
    login: Callable[[User], Client], reviewer: User, slack_api: FakeSlack
) -> None:
    client = login(reviewer)
    html = client.get(URL).content.decode()
    assert 'id="slack-ask-admin"' in html and 'id="slack-link-form"' not in html
    slack_api.users["UALICE01"] = slack_member("UALICE01", "")
    assert link(client, "UALICE01").status_code == 400
    assert not ReviewerReach.objects.filter(user=reviewer).exists()
    assert slack_api.named("users.info") == []


def test_without_slack_set_up_the_page_says_so(
    login: Callable[[User], Client], alice: User, settings: Any
) -> None:
    settings.SLACK_BOT_TOKEN = ""
    html = login(alice).get(URL).content.decode()
    assert 'id="slack-not-set-up"' in html and 'id="slack-link-form"' not in html
