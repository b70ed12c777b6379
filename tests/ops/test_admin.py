"""The operator's admin: keys shown once, immediate revocation, request actions, a read-only audit with exports,
webhook replay, and no secret on any admin page."""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from elicitation.flows import hosted_flows
from elicitation.models import (
    Agent,
    AgentEvent,
    DeliveryStatus,
    ElicitationRequest,
    ExpiryOutcome,
    HostedFlow,
    Queue,
    RequestEvent,
    ReviewerToken,
    Scope,
    Status,
    WebhookDelivery,
)
from elicitation.queue import audit, transitions
from elicitation.queue.keys import webhook_secret
from tests.ops.audit_exports import read_csv, read_jsonl

AGENT_KEY = re.compile(r"rh_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}")
TOKEN_KEY = re.compile(r"rhr_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}")
CHANGELIST = "/admin/elicitation/agent/"


def api_status(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get("/api/v1/requests").status_code


def run_action(client: Client, changelist: str, action: str, pks: list[Any], **extra: str) -> Any:
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], "index": "0", **extra}
    return client.post(changelist, data)


def create_agent_in_admin(client: Client, queue: Queue, name: str = "billing-bot") -> tuple[Agent, str]:
    response = client.post(
        "/admin/elicitation/agent/add/",
        {"name": name, "queues": [queue.pk], "scopes": [Scope.REQUESTS], "callback_url": ""},
    )
    assert response.status_code == 200, response.content[:2000]
    keys = AGENT_KEY.findall(response.content.decode())
    assert len(keys) == 1
    return Agent.objects.get(name=name), keys[0]


# --- keys ----------------------------------------------------------------------------------------------------------


def test_creating_an_agent_shows_its_key_once_then_only_the_prefix(
    admin_client: Client, queue: Queue
) -> None:
    response = admin_client.post(
        "/admin/elicitation/agent/add/",
        {"name": "billing-bot", "queues": [queue.pk], "scopes": [Scope.REQUESTS, Scope.FLOWS_SECRETS]},
    )
    page = response.content.decode()
    [key] = AGENT_KEY.findall(page)
    agent = Agent.objects.get(name="billing-bot")

    assert "no-store" in response["Cache-Control"]
    assert webhook_secret(agent.pk, agent.key_prefix) in page
    assert key.startswith(f"rh_{agent.key_prefix}_")
    assert sorted(agent.scopes) == sorted([Scope.REQUESTS, Scope.FLOWS_SECRETS])
    assert list(agent.queues.all()) == [queue]
    assert api_status(key) == 200

    for url in (CHANGELIST, f"{CHANGELIST}{agent.pk}/change/", f"{CHANGELIST}?q=billing"):
        later = admin_client.get(url).content.decode()
        assert key not in later
        assert f"rh_{agent.key_prefix}_…" in later
        assert agent.key_hash not in later
        assert webhook_secret(agent.pk, agent.key_prefix) not in later


def test_scopes_are_checkboxes_of_the_known_scopes(admin_client: Client) -> None:
    page = admin_client.get("/admin/elicitation/agent/add/").content.decode()
    for scope in Scope.values:
        assert re.search(rf'<input type="checkbox" name="scopes" value="{re.escape(scope)}"', page)


def test_rotating_shows_the_new_key_once_and_the_old_key_stops_working(
    admin_client: Client, queue: Queue
) -> None:
    agent, old_key = create_agent_in_admin(admin_client, queue)

    confirm = run_action(admin_client, CHANGELIST, "rotate_keys", [agent.pk])
    assert b"Rotate keys" in confirm.content
    assert api_status(old_key) == 200  # nothing happens before the operator confirms

    response = run_action(admin_client, CHANGELIST, "rotate_keys", [agent.pk], confirm="yes")
    [new_key] = AGENT_KEY.findall(response.content.decode())

    assert "no-store" in response["Cache-Control"]
    assert new_key != old_key
    assert api_status(old_key) == 401
    assert api_status(new_key) == 200
    assert new_key not in admin_client.get(f"{CHANGELIST}{agent.pk}/change/").content.decode()


def test_a_revoked_key_is_refused_right_after_the_admin_action(admin_client: Client, queue: Queue) -> None:
    agent, key = create_agent_in_admin(admin_client, queue)
    assert api_status(key) == 200

    response = run_action(admin_client, CHANGELIST, "revoke_keys", [agent.pk], confirm="yes")

    assert response.status_code == 302
    assert api_status(key) == 401
    agent.refresh_from_db()
    assert agent.revoked_at is not None
    # A revoked agent cannot be given a fresh key by rotation.
    rotated = run_action(admin_client, CHANGELIST, "rotate_keys", [agent.pk], confirm="yes")
    assert AGENT_KEY.findall(rotated.content.decode()) == []
    assert api_status(key) == 401


def test_the_agent_page_offers_rotate_and_revoke(admin_client: Client, agent: Agent) -> None:
    page = admin_client.get(f"{CHANGELIST}{agent.pk}/change/").content.decode()
    assert 'value="rotate_keys"' in page
    assert 'value="revoke_keys"' in page


def test_a_reviewer_token_is_shown_once_and_revocation_is_immediate(
    admin_client: Client, reviewer: User
) -> None:
    response = admin_client.post(
        "/admin/elicitation/reviewertoken/add/", {"user": reviewer.pk, "name": "cli"}
    )
    [key] = TOKEN_KEY.findall(response.content.decode())
    token = ReviewerToken.objects.get(user=reviewer)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/review/queues").status_code == 200
    assert key not in admin_client.get("/admin/elicitation/reviewertoken/").content.decode()

    run_action(admin_client, "/admin/elicitation/reviewertoken/", "revoke_tokens", [token.pk])

    assert client.get("/api/v1/review/queues").status_code == 401


# --- queues --------------------------------------------------------------------------------------------------------


def _queue_form(**overrides: Any) -> dict[str, Any]:
    return {
        "slug": "ops",
        "name": "Ops",
        "default_deadline_seconds": 900,
        "lease_seconds": 120,
        "expiry_outcome": ExpiryOutcome.CANCEL,
        "escalation_queue": "",
        "priority_threshold": "",
        **overrides,
    }


def test_a_queue_is_configured_from_the_admin(admin_client: Client, queue: Queue, reviewer: User) -> None:
    response = admin_client.post(
        "/admin/elicitation/queue/add/",
        _queue_form(
            members=[reviewer.pk],
            supervisors=[reviewer.pk],
            expiry_outcome=ExpiryOutcome.ESCALATE,
            escalation_queue=queue.pk,
            priority_threshold=5,
        ),
    )
    assert response.status_code == 302
    created = Queue.objects.get(slug="ops")
    assert (created.escalation_queue, created.priority_threshold, created.lease_seconds) == (queue, 5, 120)
    assert list(created.members.all()) == [reviewer]
    assert "escalate → payments" in admin_client.get("/admin/elicitation/queue/").content.decode()


def test_escalation_needs_a_target_other_than_itself(admin_client: Client, queue: Queue) -> None:
    missing = admin_client.post("/admin/elicitation/queue/add/", _queue_form(expiry_outcome="escalate"))
    assert b"Choose the queue overdue requests escalate to." in missing.content

    itself = admin_client.post(
        f"/admin/elicitation/queue/{queue.pk}/change/",
        _queue_form(slug=queue.slug, expiry_outcome="escalate", escalation_queue=queue.pk),
    )
    assert b"A queue cannot escalate to itself." in itself.content
    queue.refresh_from_db()
    assert queue.expiry_outcome == ExpiryOutcome.CANCEL


def test_a_lease_below_the_minimum_is_a_form_error_not_a_crash(admin_client: Client) -> None:
    response = admin_client.post("/admin/elicitation/queue/add/", _queue_form(lease_seconds=1))
    assert response.status_code == 200
    assert not Queue.objects.filter(slug="ops").exists()


def test_an_escalation_target_cannot_be_deleted(
    admin_client: Client, queue: Queue, other_queue: Queue
) -> None:
    queue.expiry_outcome, queue.escalation_queue = ExpiryOutcome.ESCALATE, other_queue
    queue.save()
    response = admin_client.post(f"/admin/elicitation/queue/{other_queue.pk}/delete/", {"post": "yes"})
    assert response.status_code == 200
    assert b"escalates here" in response.content
    assert Queue.objects.filter(pk=other_queue.pk).exists()


# --- requests ------------------------------------------------------------------------------------------------------

REQUESTS = "/admin/elicitation/elicitationrequest/"


def test_requests_are_read_only(admin_client: Client, make_request) -> None:
    request = make_request()
    assert admin_client.get(f"{REQUESTS}add/").status_code == 403
    change = admin_client.post(f"{REQUESTS}{request.pk}/change/", {"message": "rewritten"})
    assert change.status_code == 403
    assert admin_client.post(f"{REQUESTS}{request.pk}/delete/", {"post": "yes"}).status_code == 403
    request.refresh_from_db()
    assert request.message != "rewritten"


def test_the_expire_action_applies_the_queue_outcome_as_the_operator(
    admin_client: Client, admin_user: User, make_request
) -> None:
    open_request = make_request()
    done = make_request()
    transitions.withdraw_request(done.pk, agent=done.agent)

    response = run_action(admin_client, REQUESTS, "expire_now", [open_request.pk, done.pk])

    assert response.status_code == 302
    open_request.refresh_from_db()
    assert (open_request.status, open_request.action) == (Status.EXPIRED, "cancel")
    assert open_request.events.get(kind="expired").actor_user == admin_user
    assert AgentEvent.objects.filter(request=open_request, kind="expired").count() == 1
    messages = [str(m) for m in response.wsgi_request._messages]
    assert "1 request(s) expired or escalated." in messages
    assert "1 request(s) skipped: not in a state that allows it." in messages


def test_the_release_action_returns_a_claim_and_names_the_holder(
    admin_client: Client, admin_user: User, make_request, reviewer: User
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)

    run_action(admin_client, REQUESTS, "release_claims", [request.pk])

    request.refresh_from_db()
    assert (request.status, request.claimed_by) == (Status.PENDING, None)
    released = request.events.get(kind="released")
    assert released.actor_user == admin_user
    assert released.detail == {"holder": "alice", "by": "operator"}


def test_a_view_only_operator_cannot_run_request_actions(make_request, db) -> None:
    from django.contrib.auth.models import Permission

    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_elicitationrequest"))
    client = Client()
    client.force_login(viewer)
    request = make_request()

    page = client.get(REQUESTS).content.decode()
    assert "expire_now" not in page
    run_action(client, REQUESTS, "expire_now", [request.pk])
    request.refresh_from_db()
    assert request.status == Status.PENDING


def test_viewing_a_request_in_the_admin_is_audited(
    admin_client: Client, admin_user: User, make_request
) -> None:
    request = make_request()
    page = admin_client.get(f"{REQUESTS}{request.pk}/change/")
    assert page.status_code == 200
    assert request.events.filter(kind="viewed", actor_user=admin_user).count() == 1
    assert b"Approve transfer of 100 EUR?" in page.content  # the request's own content is readable


@pytest.mark.parametrize(
    "query",
    [
        "status__exact=pending",
        "queue__id__exact={queue}",
        "agent__id__exact={agent}",
        "q=transfer",
        "created_at__year={year}",
    ],
)
def test_request_filters_and_search(admin_client: Client, make_request, queue, agent, query: str) -> None:
    from django.utils import timezone

    request = make_request()
    url = REQUESTS + "?" + query.format(queue=queue.pk, agent=agent.pk, year=timezone.now().year)
    response = admin_client.get(url)
    assert response.status_code == 200
    assert str(request.pk)[:8] in response.content.decode()


def test_filter_by_status_excludes_other_statuses(admin_client: Client, make_request, agent) -> None:
    withdrawn = make_request(message="gone")
    transitions.withdraw_request(withdrawn.pk, agent=agent)
    pending = make_request()
    page = admin_client.get(REQUESTS + "?status__exact=pending").content.decode()
    assert str(pending.pk)[:8] in page
    assert str(withdrawn.pk)[:8] not in page


# --- audit ---------------------------------------------------------------------------------------------------------

EVENTS = "/admin/elicitation/requestevent/"


def test_audit_events_cannot_be_added_changed_or_deleted(admin_client: Client, make_request) -> None:
    event = make_request().events.get()
    assert admin_client.get(f"{EVENTS}add/").status_code == 403
    assert admin_client.post(f"{EVENTS}{event.pk}/change/", {"kind": "x"}).status_code == 403
    assert admin_client.post(f"{EVENTS}{event.pk}/delete/", {"post": "yes"}).status_code == 403
    page = admin_client.get(EVENTS).content.decode()
    assert "delete_selected" not in page
    assert RequestEvent.objects.get(pk=event.pk).kind == "created"


def test_audit_export_buttons_respect_the_filters_and_round_trip(
    admin_client: Client, make_request, reviewer: User
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    make_request()
    page = admin_client.get(EVENTS).content.decode()
    assert "export.csv" in page and "export.jsonl" in page

    every = read_jsonl(admin_client.get(f"{EVENTS}export.jsonl").content.decode())
    claims = read_csv(admin_client.get(f"{EVENTS}export.csv?kind__exact=claimed").content.decode())

    assert every == list(audit.export_rows(audit.audit_events()))
    assert [row["kind"] for row in claims] == ["claimed"]
    assert claims[0]["actor_user"] == "alice"


def test_audit_export_action_on_selected_rows(admin_client: Client, make_request) -> None:
    first = make_request().events.get()
    make_request()
    response = run_action(admin_client, EVENTS, "export_jsonl", [first.pk])
    assert response["Content-Disposition"].startswith("attachment;")
    assert [row["id"] for row in read_jsonl(response.content.decode())] == [first.pk]


def test_the_verify_button_reports_a_broken_chain(admin_client: Client, make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    ok = admin_client.get(f"{EVENTS}verify/", follow=True).content.decode()
    assert "Audit chain intact" in ok

    RequestEvent.objects.filter(request=request, kind="created").update(detail={"forged": True})
    broken = admin_client.get(f"{EVENTS}verify/", follow=True).content.decode()
    assert "Audit chain broken" in broken
    assert "edited" in broken


# --- webhooks ------------------------------------------------------------------------------------------------------


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """The services leg has a broker but no worker in this process: run tasks in-process, as embedded does."""
    from reviewhub.celery import app as celery_app

    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def test_replaying_a_dead_letter_delivers_it_again(
    admin_client: Client,
    make_request,
    reviewer,
    monkeypatch,
    django_capture_on_commit_callbacks,
    eager_celery,
) -> None:
    from elicitation.delivery import webhooks

    request = make_request(callback_url="https://agent.example/hook")
    posts: list[str] = []
    answers = [(503, "HTTP 503")]

    def fake_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str]:
        posts.append(url)
        return answers[-1]

    monkeypatch.setattr(webhooks, "post_event", fake_post)
    transitions.claim_request(request.pk, user=reviewer)
    with django_capture_on_commit_callbacks(execute=True):
        transitions.respond(request.pk, user=reviewer, action="decline")
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.DEAD, attempts=8, last_error="HTTP 503", next_attempt_at=None
    )
    page = admin_client.get("/admin/elicitation/webhookdelivery/").content.decode()
    assert "dead" in page and "HTTP 503" in page

    answers.append((200, ""))
    with django_capture_on_commit_callbacks(execute=True):
        run_action(admin_client, "/admin/elicitation/webhookdelivery/", "replay", [delivery.pk])

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (DeliveryStatus.DELIVERED, 1, "")
    assert posts[-1] == "https://agent.example/hook"


# --- secrets -------------------------------------------------------------------------------------------------------


@pytest.fixture
def secrets_everywhere(admin_client: Client, queue: Queue, reviewer: User, settings) -> dict[str, Any]:
    """One of everything an operator can see, holding every kind of secret ReviewHub keeps."""
    settings.PUBLIC_URL = "https://reviewhub.example.com"
    agent, agent_key = create_agent_in_admin(admin_client, queue, "vault-bot")
    Agent.objects.filter(pk=agent.pk).update(scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS])
    agent.refresh_from_db()
    token_page = admin_client.post(
        "/admin/elicitation/reviewertoken/add/", {"user": reviewer.pk, "name": "t"}
    )
    [token_key] = TOKEN_KEY.findall(token_page.content.decode())
    flow, _ = hosted_flows.create_hosted_flow(
        agent=agent,
        queue_slug=queue.slug,
        message="Registry token please",
        requested_schema={
            "type": "object",
            "properties": {"api_token": {"type": "string", "title": "API token"}},
            "required": ["api_token"],
        },
    )
    transitions.claim_request(flow.request_id, user=reviewer)
    secret_value = "S3cr3t-do-not-show-4d1c9a"
    hosted_flows.complete_hosted_flow(flow.pk, user=reviewer, content={"api_token": secret_value})
    flow = HostedFlow.objects.get(pk=flow.pk)
    assert flow.ciphertext
    return {
        "agent": agent,
        "flow": flow,
        "needles": [
            agent_key,
            agent.key_hash,
            webhook_secret(agent.pk, agent.key_prefix),
            token_key,
            ReviewerToken.objects.get().key_hash,
            secret_value,
            bytes(flow.ciphertext).hex(),
            bytes(flow.nonce).hex(),
            repr(bytes(flow.ciphertext))[2:30],
            __import__("base64").b64encode(bytes(flow.ciphertext)).decode()[:24],
            settings.API_KEY_PEPPER,
        ],
    }


def _admin_pages(client: Client) -> list[str]:
    from django.contrib import admin as django_admin

    urls = ["/admin/"]
    for model in django_admin.site._registry:
        opts = model._meta
        if opts.app_label != "elicitation":
            continue
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
        for pk in model.objects.values_list("pk", flat=True)[:20]:
            urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk]))
            urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_history", args=[pk]))
    urls += [f"{EVENTS}export.csv", f"{EVENTS}export.jsonl"]
    return urls


def test_no_secret_appears_on_any_admin_page(
    admin_client: Client, secrets_everywhere: dict[str, Any]
) -> None:
    pages = _admin_pages(admin_client)
    flow = secrets_everywhere["flow"]
    assert f"/admin/elicitation/hostedflow/{flow.pk}/change/" in pages
    assert f"{REQUESTS}{flow.request_id}/change/" in pages

    for url in pages:
        response = admin_client.get(url)
        read_only_add = url.endswith("/add/") and response.status_code == 403
        assert response.status_code == 200 or read_only_add, url
        body = response.content.decode()
        for needle in secrets_everywhere["needles"]:
            assert needle not in body, (url, needle[:12])
    hosted_request = admin_client.get(f"{REQUESTS}{flow.request_id}/change/").content.decode()
    assert "hidden: collected by a hosted flow" in hosted_request
    flow_page = admin_client.get(f"/admin/elicitation/hostedflow/{flow.pk}/change/").content.decode()
    assert "submitted" in flow_page
    assert "ciphertext" not in flow_page.lower() and "nonce" not in flow_page.lower()


def test_hosted_flow_rows_are_read_only(admin_client: Client, secrets_everywhere: dict[str, Any]) -> None:
    flow = secrets_everywhere["flow"]
    assert admin_client.get("/admin/elicitation/hostedflow/add/").status_code == 403
    assert (
        admin_client.post(f"/admin/elicitation/hostedflow/{flow.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert ElicitationRequest.objects.filter(pk=flow.request_id).exists()
