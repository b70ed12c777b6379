"""Web Push, end to end with the real client library on the wire: pywebpush sends to a push service on loopback
that checks the VAPID JWT (RFC 8292) and decrypts the aes128gcm body (RFC 8291) with keys only the browser holds;
subscriptions a push service says are gone are deleted; quiet hours and the told-once rule hold; an Approve /
Reject token answers once, through the page's transitions, and a replayed or foreign one is refused. A request whose
accept needs a passkey is pushed with Decline and "Approve with passkey" (the page) and no Approve token; one made
anyway is refused by `respond`."""

import json
import threading
from collections.abc import Callable, Iterator
from datetime import time
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import signing
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from elicitation.delivery import notices, push_actions, routing, web_push
from elicitation.models import (
    Channel,
    ElicitationRequest,
    Notice,
    PushAction,
    PushSubscription,
    Queue,
    ReachRule,
    RequestEvent,
    ReviewerReach,
    Status,
)
from elicitation.queue import clock, rules, step_up, transitions
from elicitation.reviewer.rate_budget import charge_reviewer_rate
from reviewhub.rates import parse_rate
from tests.conftest import FORM_SCHEMA
from tests.delivery.reach.push_service import Browser, Delivery, PushService
from tests.security.test_step_up import PAY, STEP_UP_RULE

YES_NO = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}


@pytest.fixture
def vapid_keys(settings: Any) -> tuple[str, str]:
    private, public = web_push.generate_keys()
    settings.WEB_PUSH_VAPID_PRIVATE_KEY = private
    settings.WEB_PUSH_VAPID_PUBLIC_KEY = public
    settings.WEB_PUSH_CONTACT = "mailto:ops@example.com"
    settings.WEB_PUSH_ALLOW_PRIVATE_ENDPOINTS = True  # the push service is on loopback
    return private, public


@pytest.fixture
def push_service(vapid_keys: tuple[str, str]) -> Iterator[PushService]:
    service = PushService(vapid_keys[1]).start()
    yield service
    service.stop()


@pytest.fixture
def push_rule(queue: Queue) -> ReachRule:
    return ReachRule.objects.create(queue=queue, channel=Channel.PUSH, audience="members")


def subscribe(service: PushService, user: User, name: str) -> tuple[Browser, PushSubscription]:
    browser = service.browser(name)
    row = PushSubscription.objects.create(
        user=user,
        endpoint=service.endpoint(name),
        p256dh=browser.p256dh,
        auth=web_push.b64url(browser.auth),
        label=f"{name} browser",
        created_at=clock.now(),
    )
    return browser, row


@pytest.fixture
def phone(push_service: PushService, reviewer: User) -> PushSubscription:
    """The reviewer's phone, subscribed before anything is asked."""
    return subscribe(push_service, reviewer, "phone")[1]


Post = Callable[..., ElicitationRequest]


@pytest.fixture
def post(
    push_rule: ReachRule,
    push_service: PushService,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> Post:
    """Ask (a yes/no approval unless told otherwise) with the queue's push rule in place; the arrival's notices
    are sent as the commit would send them."""

    def post_request(**fields: Any) -> ElicitationRequest:
        with django_capture_on_commit_callbacks(execute=True):
            return make_request(**{"requested_schema": YES_NO, **fields})

    return post_request


def push_notice(request: ElicitationRequest) -> Notice:
    return Notice.objects.get(request=request, channel=Channel.PUSH)


def action_token(delivery: Delivery, action: str) -> str:
    return str(next(item["token"] for item in delivery.payload["actions"] if item["action"] == action))


def press(request: ElicitationRequest, token: str, client: Client | None = None) -> Any:
    return (client or Client()).post(
        reverse("push-answer", kwargs={"request_id": request.pk}),
        json.dumps({"token": token}),
        content_type="application/json",
    )


# --- sending --------------------------------------------------------------------------------------------------------


def test_an_arrival_reaches_each_browser_signed_with_vapid_and_encrypted_to_its_keys(
    phone: PushSubscription, push_service: PushService, reviewer: User, post: Post
) -> None:
    subscribe(push_service, reviewer, "laptop")
    request = post(message="Deploy <b>v2</b>?")
    deliveries = push_service.wait_for(2)
    assert push_service.refusals == []
    assert sorted(d.browser for d in deliveries) == ["laptop", "phone"]
    for delivery in deliveries:
        assert delivery.claims["aud"] == push_service.origin
        assert delivery.claims["sub"] == "mailto:ops@example.com"
        assert delivery.headers["urgency"] == "high"
        assert delivery.headers["topic"] == request.pk.hex
        assert 0 < int(delivery.headers["ttl"]) <= 600
        payload = delivery.payload
        assert payload["title"] == "Payments: " + request.agent.name + " needs a reviewer"
        assert payload["body"] == "Deploy <b>v2</b>?"  # text, shown as text by the notification
        assert payload["url"] == f"/requests/{request.pk}/"
        assert payload["answerUrl"] == f"/requests/{request.pk}/push-answer"
        assert [(a["action"], a["title"]) for a in payload["actions"]] == [
            ("approve", "Approve"),
            ("reject", "Reject"),
        ]
    notice = push_notice(request)
    assert (notice.status, notice.recipient, notice.sent_at is not None) == (
        "sent",
        f"user:{reviewer.pk}",
        True,
    )
    assert PushSubscription.objects.filter(user=reviewer, last_used_at__isnull=False).count() == 2


def test_a_form_that_is_not_one_yes_no_question_only_opens_the_request(
    phone: PushSubscription, push_service: PushService, post: Post
) -> None:
    post(requested_schema=FORM_SCHEMA)  # several questions
    [delivery] = push_service.wait_for(1)
    assert delivery.payload["actions"] == []
    assert "answerUrl" not in delivery.payload
    assert PushAction.objects.count() == 0


def test_a_url_request_shows_nothing_of_its_message(
    phone: PushSubscription, push_service: PushService, post: Post
) -> None:
    post(mode="url", url="https://example.com/connect", requested_schema=None, message="secret-ish context")
    [delivery] = push_service.wait_for(1)
    assert "secret-ish" not in json.dumps(delivery.payload)
    assert delivery.payload["actions"] == []


def test_a_long_message_and_long_names_still_fit_one_push(
    phone: PushSubscription, push_service: PushService, queue: Queue, post: Post
) -> None:
    Queue.objects.filter(pk=queue.pk).update(name="Q" * 200)
    post(message="x" * 4000)
    [delivery] = push_service.wait_for(1)
    assert len(delivery.payload["body"]) == web_push.BODY_LIMIT
    assert len(delivery.payload["title"]) == 120
    # RFC 8030 push services take 4096 bytes of encrypted body; aes128gcm adds 103 (header, tag, padding byte).
    assert len(json.dumps(delivery.payload, separators=(",", ":")).encode()) < 4096 - 103


def test_a_holder_kept_past_t2_is_pushed_on_the_queues_push_channel(
    push_service: PushService, reviewer: User, post: Post
) -> None:
    request = post()
    subscribe(push_service, reviewer, "phone")  # after the arrival: only the T2 notice reaches it
    transitions.claim_request(request.pk, user=reviewer)
    [batch] = notices.record_notice_batches(request.pk, routing.HOLDER_TIER)
    notices.send_notices(batch)
    [delivery] = push_service.wait_for(1)
    assert delivery.payload["request"] == str(request.pk)
    notice = Notice.objects.get(pk=batch[0])
    assert (notice.channel, notice.recipient, notice.status) == (
        "push",
        f"t2:{request.queue_id}:user:{reviewer.pk}",
        "sent",
    )


def test_gone_and_unknown_subscriptions_are_deleted_and_the_rest_still_reached(
    push_service: PushService, reviewer: User, post: Post
) -> None:
    _, gone = subscribe(push_service, reviewer, "old-phone")
    _, unknown = subscribe(push_service, reviewer, "wiped-laptop")
    _, kept = subscribe(push_service, reviewer, "desktop")
    push_service.gone.add("old-phone")
    push_service.not_found.add("wiped-laptop")
    request = post()
    assert [d.browser for d in push_service.wait_for(1)] == ["desktop"]
    assert list(PushSubscription.objects.values_list("pk", flat=True)) == [kept.pk]
    assert push_notice(request).status == "sent"
    assert not PushSubscription.objects.filter(pk__in=[gone.pk, unknown.pk]).exists()


def test_a_notice_whose_every_browser_is_gone_is_retried_not_marked_sent(
    push_service: PushService, reviewer: User, post: Post
) -> None:
    subscribe(push_service, reviewer, "old-phone")
    push_service.gone.add("old-phone")
    notice = push_notice(post())
    assert (notice.status, notice.attempts) == ("pending", 1)
    assert "gone" in notice.reason
    assert not PushSubscription.objects.exists()


def test_quiet_hours_hold_the_push_back(
    phone: PushSubscription, push_service: PushService, reviewer: User, post: Post
) -> None:
    ReviewerReach.objects.create(
        user=reviewer, time_zone="UTC", quiet_start=time(0, 0), quiet_end=time(23, 59)
    )
    notice = push_notice(post())
    assert (notice.status, notice.reason) == ("skipped", "quiet hours")
    assert push_service.deliveries == []


def test_a_reviewer_with_no_subscribed_browser_is_skipped_with_why(reviewer: User, post: Post) -> None:
    notice = push_notice(post())
    assert (notice.status, notice.reason) == ("skipped", "no browser subscribed to Web Push")


def test_without_vapid_keys_a_push_rule_tells_nobody_and_says_why(
    phone: PushSubscription, push_service: PushService, post: Post, settings: Any
) -> None:
    settings.WEB_PUSH_VAPID_PRIVATE_KEY = ""
    notice = push_notice(post())
    assert (notice.status, notice.reason) == ("skipped", "Web Push not set up")
    assert push_service.deliveries == []


def test_a_reviewer_is_pushed_once_however_often_the_tier_is_recorded(
    phone: PushSubscription, push_service: PushService, post: Post
) -> None:
    request = post()
    push_service.wait_for(1)
    assert notices.record_notice_batches(request.pk, 0) == []
    assert notices.due_notice_batches() == []
    assert len(push_service.deliveries) == 1


# --- actions --------------------------------------------------------------------------------------------------------


@pytest.fixture
def pushed(
    phone: PushSubscription, push_service: PushService, post: Post
) -> tuple[ElicitationRequest, Delivery]:
    request = post()
    [delivery] = push_service.wait_for(1)
    return request, delivery


def test_approve_answers_through_the_pages_claim_and_audit_path(
    pushed: tuple[ElicitationRequest, Delivery], reviewer: User
) -> None:
    request, delivery = pushed
    response = press(request, action_token(delivery, "approve"))
    assert response.status_code == 200, response.content
    assert response.json() == {"request": str(request.pk), "status": "completed", "outcome": "Approved"}
    request.refresh_from_db()
    assert (request.status, request.action, request.content) == (Status.COMPLETED, "accept", {"ok": True})
    assert request.answered_by == reviewer
    kinds = list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True))
    assert "claimed" in kinds and "completed" in kinds


def test_reject_gives_the_agent_no(pushed: tuple[ElicitationRequest, Delivery]) -> None:
    request, delivery = pushed
    assert press(request, action_token(delivery, "reject")).json()["outcome"] == "Rejected"
    request.refresh_from_db()
    assert (request.action, request.content) == ("accept", {"ok": False})


def test_a_replayed_token_is_refused_and_the_answer_stands(
    pushed: tuple[ElicitationRequest, Delivery],
) -> None:
    request, delivery = pushed
    assert press(request, action_token(delivery, "approve")).status_code == 200
    again = press(request, action_token(delivery, "approve"))
    assert again.status_code == 409
    assert again.json()["code"] == "conflict"
    assert "already used" in again.json()["detail"]
    other = press(request, action_token(delivery, "reject"))  # the same notification's other button
    assert other.status_code == 409
    request.refresh_from_db()
    assert (request.status, request.content) == (Status.COMPLETED, {"ok": True})


@pytest.mark.django_db(transaction=True)
def test_two_presses_at_once_answer_once(pushed: tuple[ElicitationRequest, Delivery]) -> None:
    """The losing side of the race: both tokens of one notification pressed together (two devices)."""
    request, delivery = pushed
    statuses: list[int] = []
    start = threading.Barrier(2)

    def press_in_thread(action: str) -> None:
        try:
            start.wait()
            statuses.append(press(request, action_token(delivery, action)).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=press_in_thread, args=(action,)) for action in ("approve", "reject")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 409]
    request.refresh_from_db()
    assert request.status == Status.COMPLETED
    assert PushAction.objects.get().used_for in ("approve", "reject")
    assert request.content == {"ok": PushAction.objects.get().used_for == "approve"}


def test_a_token_for_another_request_is_refused(
    pushed: tuple[ElicitationRequest, Delivery],
    make_request: Callable[..., ElicitationRequest],
) -> None:
    request, delivery = pushed
    other = make_request(requested_schema=YES_NO)
    response = press(other, action_token(delivery, "approve"))
    assert response.status_code == 403
    assert response.json()["detail"] == "This action token is for another request."
    other.refresh_from_db()
    request.refresh_from_db()
    assert (other.status, request.status) == (Status.PENDING, Status.PENDING)
    assert PushAction.objects.filter(used_at__isnull=False).count() == 0


def test_another_signed_in_reviewer_cannot_use_my_token(
    pushed: tuple[ElicitationRequest, Delivery], make_reviewer: Callable[..., User], queue: Queue
) -> None:
    request, delivery = pushed
    bob = make_reviewer("bob", queue)
    client = Client()
    client.force_login(bob)
    response = press(request, action_token(delivery, "approve"), client)
    assert response.status_code == 403
    assert "another reviewer's" in response.json()["detail"]
    request.refresh_from_db()
    assert request.status == Status.PENDING


def test_a_forged_or_altered_token_is_refused(pushed: tuple[ElicitationRequest, Delivery]) -> None:
    request, delivery = pushed
    token = action_token(delivery, "approve")
    for bad in (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "not-a-token", ""):
        response = press(request, bad)
        assert response.status_code == 403, bad
        assert response.json()["code"] == "forbidden"
    request.refresh_from_db()
    assert request.status == Status.PENDING


def test_a_reviewer_taken_off_the_queue_can_no_longer_answer(
    pushed: tuple[ElicitationRequest, Delivery], reviewer: User, queue: Queue
) -> None:
    request, delivery = pushed
    queue.members.remove(reviewer)
    assert press(request, action_token(delivery, "approve")).status_code == 403
    request.refresh_from_db()
    assert request.status == Status.PENDING


def test_a_request_someone_else_holds_is_not_taken_from_them(
    pushed: tuple[ElicitationRequest, Delivery], make_reviewer: Callable[..., User], queue: Queue
) -> None:
    request, delivery = pushed
    transitions.claim_request(request.pk, user=make_reviewer("bob", queue))
    response = press(request, action_token(delivery, "approve"))
    assert response.status_code == 409
    assert PushAction.objects.get().used_at is None  # refused answers roll the mark back
    request.refresh_from_db()
    assert request.status == Status.CLAIMED


def test_an_action_over_the_reviewers_rate_budget_is_a_429(
    pushed: tuple[ElicitationRequest, Delivery], settings: Any
) -> None:
    request, delivery = pushed
    settings.REVIEWER_RATE = parse_rate("1/hour")
    client = Client()
    assert press(request, "garbage", client).status_code == 403  # refused before the budget is charged
    charge_reviewer_rate(request.queue.members.get())  # the hour's one call, spent elsewhere
    response = press(request, action_token(delivery, "approve"), client)
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    request.refresh_from_db()
    assert request.status == Status.PENDING


# --- a request whose accept needs a passkey --------------------------------------------------------------------------


@pytest.fixture
def pushed_step_up(
    queue: Queue, phone: PushSubscription, push_service: PushService, post: Post
) -> tuple[ElicitationRequest, Delivery]:
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    request = post(context=PAY)
    assert step_up.required(request)
    [delivery] = push_service.wait_for(1)
    return request, delivery


def test_a_step_up_approval_offers_decline_and_approve_with_passkey_but_no_approve(
    pushed_step_up: tuple[ElicitationRequest, Delivery],
) -> None:
    request, delivery = pushed_step_up
    payload = delivery.payload
    assert [(a["action"], a["title"], "token" in a) for a in payload["actions"]] == [
        ("open", "Approve with passkey", False),  # opens the page, where the passkey signs
        ("decline", "Decline", True),
    ]
    assert (payload["url"], payload["answerUrl"]) == (
        f"/requests/{request.pk}/",
        f"/requests/{request.pk}/push-answer",
    )
    claims = signing.loads(action_token(delivery, "decline"), salt=push_actions.SALT)
    assert (claims["a"], claims["r"]) == ("decline", str(request.pk))
    assert PushAction.objects.filter(request=request).count() == 1  # one row, and no Approve token minted


def test_a_step_up_approvals_decline_needs_no_passkey(
    pushed_step_up: tuple[ElicitationRequest, Delivery], reviewer: User
) -> None:
    request, delivery = pushed_step_up
    response = press(request, action_token(delivery, "decline"))
    assert response.status_code == 200, response.content
    assert response.json() == {"request": str(request.pk), "status": "completed", "outcome": "Declined"}
    request.refresh_from_db()
    assert (request.status, request.action, request.answered_by) == (Status.COMPLETED, "decline", reviewer)
    assert PushAction.objects.get(request=request).used_for == "decline"


def test_an_approve_token_for_a_step_up_approval_is_refused_and_nothing_is_recorded(
    pushed_step_up: tuple[ElicitationRequest, Delivery],
) -> None:
    request, delivery = pushed_step_up
    # The Decline token's claims turned into Approve and signed again with the server's key: the digest is
    # Decline's answer, not Approve's.
    claims = signing.loads(action_token(delivery, "decline"), salt=push_actions.SALT)
    altered = press(request, signing.dumps({**claims, "a": "approve"}, salt=push_actions.SALT))
    assert altered.status_code == 403
    assert altered.json()["fields"] == {"token": "digest mismatch"}
    # A whole Approve token made with the server's key (as a server before this change made them): `respond`'s
    # own step-up check refuses the accept, and the claim and the token's use roll back with it.
    minted = press(request, push_actions.action_token(PushAction.objects.get(request=request), "approve"))
    assert minted.status_code == 403
    assert minted.json()["code"] == "forbidden"
    assert "needs a passkey" in minted.json()["detail"]
    assert f"/requests/{request.pk}/" in minted.json()["fields"]["step_up"]
    request.refresh_from_db()
    assert request.status == Status.PENDING
    assert PushAction.objects.get(request=request).used_at is None
    assert not RequestEvent.objects.filter(request=request, kind__in=["claimed", "completed"]).exists()


# --- subscriptions --------------------------------------------------------------------------------------------------


def browser_json(service: PushService, name: str) -> dict[str, Any]:
    browser = service.browser(name)
    return {
        "endpoint": service.endpoint(name),
        "keys": {"p256dh": browser.p256dh, "auth": web_push.b64url(browser.auth)},
    }


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_reviewer_subscribes_a_browser_and_lists_it(push_service: PushService, reviewer: User) -> None:
    client = signed_in(reviewer)
    response = client.post(
        reverse("push-subscriptions"),
        json.dumps(browser_json(push_service, "phone")),
        content_type="application/json",
        headers={"User-Agent": "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/131.0 Mobile"},
    )
    assert response.status_code == 201, response.content
    [listed] = response.json()["subscriptions"]
    assert (listed["label"], listed["pushService"]) == ("Chrome on Android", "127.0.0.1")
    assert PushSubscription.objects.get().user == reviewer
    page = client.get(reverse("preferences"))
    assert b"Chrome on Android" in page.content and b"data-key=" in page.content


def test_a_subscription_that_is_not_one_is_a_400_naming_the_field(
    push_service: PushService, reviewer: User
) -> None:
    body = browser_json(push_service, "phone")
    body["keys"]["p256dh"] = web_push.b64url(b"\x04" + b"\x01" * 64)  # not a point on the curve
    body["keys"]["auth"] = "short"
    response = signed_in(reviewer).post(
        reverse("push-subscriptions"), json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "keys.p256dh": "is not a point on P-256",
        "keys.auth": "must be 16 bytes, base64url",
    }
    assert not PushSubscription.objects.exists()


def test_in_production_an_endpoint_on_a_private_address_is_refused(
    push_service: PushService, reviewer: User, settings: Any
) -> None:
    settings.WEB_PUSH_ALLOW_PRIVATE_ENDPOINTS = False
    response = signed_in(reviewer).post(
        reverse("push-subscriptions"),
        json.dumps(browser_json(push_service, "phone")),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["fields"]["endpoint"] == "must be an https URL"
    body = browser_json(push_service, "phone")
    body["endpoint"] = "https://127.0.0.1/push/phone"
    response = signed_in(reviewer).post(
        reverse("push-subscriptions"), json.dumps(body), content_type="application/json"
    )
    assert "non-public address" in response.json()["fields"]["endpoint"]


def test_without_vapid_keys_subscribing_is_a_503(reviewer: User, settings: Any) -> None:
    settings.WEB_PUSH_VAPID_PRIVATE_KEY = ""
    response = signed_in(reviewer).post(reverse("push-subscriptions"), "{}", content_type="application/json")
    assert response.status_code == 503
    assert b"push-not-set-up" in signed_in(reviewer).get(reverse("preferences")).content


def test_a_reviewer_removes_only_their_own_browsers(
    push_service: PushService, reviewer: User, make_reviewer: Callable[..., User], queue: Queue
) -> None:
    _, mine = subscribe(push_service, reviewer, "phone")
    bob = make_reviewer("bob", queue)
    url = reverse("push-unsubscribe", kwargs={"subscription_id": mine.pk})
    assert signed_in(bob).post(url, headers={"Accept": "application/json"}).status_code == 404
    assert PushSubscription.objects.filter(pk=mine.pk).exists()
    assert signed_in(reviewer).post(url).status_code == 302
    assert not PushSubscription.objects.exists()


def test_the_service_worker_is_served_from_the_root(db: None) -> None:
    response = Client().get("/service-worker.js")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert b"notificationclick" in response.content


def test_generate_vapid_keys_prints_a_pair_that_signs(settings: Any) -> None:
    out = StringIO()
    call_command("generate_vapid_keys", stdout=out)
    printed = dict(line.split("=", 1) for line in out.getvalue().splitlines() if "=" in line)
    settings.WEB_PUSH_VAPID_PRIVATE_KEY = printed["WEB_PUSH_VAPID_PRIVATE_KEY"]
    settings.WEB_PUSH_VAPID_PUBLIC_KEY = printed["WEB_PUSH_VAPID_PUBLIC_KEY"]
    settings.WEB_PUSH_CONTACT = "mailto:ops@example.com"
    assert web_push.application_server_key() == printed["WEB_PUSH_VAPID_PUBLIC_KEY"]
    assert web_push.key_problem() == ""
    settings.WEB_PUSH_VAPID_PUBLIC_KEY = web_push.generate_keys()[1]
    assert "not the public half" in web_push.key_problem()
