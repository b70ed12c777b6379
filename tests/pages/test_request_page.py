"""The request page without JavaScript: a look claims nothing, Claim claims, read-only for others, plain form posts
for every button."""

from typing import Any

import pytest

from elicitation.models import DraftState, ElicitationRequest, RequestEvent, Status
from elicitation.queue import transitions
from tests.answers import answer_of

pytestmark = pytest.mark.django_db


def page_url(request: ElicitationRequest) -> str:
    return f"/requests/{request.pk}/"


def kinds(request: ElicitationRequest) -> list[str]:
    return list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True))


def fresh(request: ElicitationRequest) -> ElicitationRequest:
    return ElicitationRequest.objects.get(pk=request.pk)


def claim(client: Any, request: ElicitationRequest) -> Any:
    """Open the page, then press its Claim button, as a reviewer does before answering."""
    client.get(page_url(request))
    return client.post(page_url(request), {"action": "claim"})


def answer(client: Any, request: ElicitationRequest, action: str, **fields: Any) -> Any:
    data: dict[str, Any] = {"action": action}
    for key, value in fields.items():
        data["skip" if key == "skip" else f"answer-{key}"] = value
    return client.post(page_url(request), data)


def test_opening_an_unclaimed_request_shows_it_without_claiming_and_records_the_view(
    login, reviewer, make_request
) -> None:
    request = make_request()
    client = login(reviewer)
    response = client.get(page_url(request))
    assert response.status_code == 200
    assert (fresh(request).status, fresh(request).claimed_by) == (Status.PENDING, None)
    assert kinds(request) == ["created", "viewed"]
    html = response.content.decode()
    assert "Preview: nobody holds this request. Claim it (c) or start typing to answer." in html
    # A preview's fields are open: typing claims it (request.js); answering from here claims first.
    assert "disabled" not in html.split('id="approve-button"')[1].split(">")[0]
    assert 'data-preview="true"' in html


def test_the_claim_button_claims_and_the_page_then_answers(login, reviewer, make_request) -> None:
    request = make_request()
    client = login(reviewer)
    response = claim(client, request)
    assert response.status_code == 302
    assert fresh(request).claimed_by == reviewer
    html = client.get(page_url(request)).content.decode()
    assert "You hold this request." in html
    assert (
        'id="approve-button"' in html and "disabled" not in html.split('id="approve-button"')[1].split(">")[0]
    )
    assert kinds(request) == ["created", "viewed", "claimed", "viewed"]


def test_reopening_your_own_claim_does_not_claim_again(login, reviewer, make_request) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    client.get(page_url(request))
    assert kinds(request) == ["created", "viewed", "claimed", "viewed"]


def test_a_request_held_by_someone_else_is_read_only_and_says_who_and_since_when(
    login, make_reviewer, make_request, queue
) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    response = login(bob).get(page_url(request))
    html = response.content.decode()
    assert response.status_code == 200
    assert fresh(request).claimed_by == alice  # looking does not take it
    claimed_at = fresh(request).claimed_at
    assert "alice is answering this request. Read-only." in html
    assert (
        f'<time datetime="{claimed_at.isoformat()}" data-local="time">{claimed_at:%H:%M:%S} UTC</time>'
        in html
    )
    assert 'data-decide="approve" aria-keyshortcuts="y" disabled' in html
    assert 'data-decide="reject" aria-keyshortcuts="n" disabled' in html
    assert 'name="answer-note" maxlength="200" data-question="note" data-kind="text"' in html
    assert "disabled" in html.split('name="answer-note"')[1].split(">")[0]
    assert "Take over" not in html  # bob is not a supervisor
    assert kinds(request)[-1] == "viewed"


def test_outsiders_get_403_and_leave_no_trace(login, make_reviewer, make_request, other_queue) -> None:
    request = make_request()
    mallory = make_reviewer("mallory", other_queue)
    client = login(mallory)
    assert client.get(page_url(request)).status_code == 403
    assert answer(client, request, "accept", approve="true").status_code == 403
    assert answer(client, request, "takeover").status_code == 403
    assert fresh(request).status == Status.PENDING
    assert kinds(request) == ["created"]


def test_anonymous_visitors_are_sent_to_login(client, make_request) -> None:
    request = make_request()
    response = client.get(page_url(request))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert client.get("/requests/00000000-0000-0000-0000-000000000000/").status_code == 302


def test_an_unknown_request_is_404(login, reviewer) -> None:
    assert login(reviewer).get("/requests/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_accept_without_javascript_sends_exactly_the_typed_content(
    login, reviewer, make_request, queue
) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    response = answer(client, request, "accept", approve="true", note=" ship it ")
    assert response.status_code == 302 and response["Location"] == f"/queues/{queue.slug}/"
    done = fresh(request)
    assert done.status == Status.COMPLETED
    assert answer_of(done.result()) == {"action": "accept", "content": {"approve": True, "note": " ship it "}}
    assert done.answered_by == reviewer
    assert "Accepted. The agent has been told." in client.get(response["Location"]).content.decode()


def test_a_required_yes_no_must_be_chosen_and_a_skipped_question_is_left_out(
    login, reviewer, make_request
) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    untouched = answer(client, request, "accept", note="typed but skipped", skip="note")
    assert untouched.status_code == 400
    assert 'data-error-for="approve">This question is required.</p>' in untouched.content.decode()
    assert fresh(request).status == Status.CLAIMED
    answer(client, request, "accept", approve="false", note="typed but skipped", skip="note")
    assert answer_of(fresh(request).result()) == {"action": "accept", "content": {"approve": False}}


def test_an_optional_or_defaulted_boolean_stays_a_checkbox_and_unchecked_is_false(
    login, reviewer, make_request
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "notify": {"type": "boolean", "title": "Notify"},
            "agree": {"type": "boolean", "title": "Agree", "default": True},
        },
        "required": ["agree"],
    }
    request = make_request(requested_schema=schema)
    client = login(reviewer)
    claim(client, request)
    html = client.get(page_url(request)).content.decode()
    assert 'type="checkbox" name="answer-notify"' in html and 'type="checkbox" name="answer-agree"' in html
    assert answer(client, request, "accept").status_code == 302
    assert fresh(request).content == {"notify": False, "agree": False}


def test_an_approval_is_approve_and_reject_buttons_and_the_click_is_the_answer(
    login, reviewer, make_request
) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    html = client.get(page_url(request)).content.decode()
    assert 'name="answer-approve"' not in html  # not a radio group
    assert '<button type="submit" name="decide" value="approve"' in html
    assert '<button type="submit" name="decide" value="reject"' in html
    assert 'data-answer="accept"' not in html  # Approve and Reject are the accept
    response = client.post(page_url(request), {"decide": "reject", "answer-note": "not today"})
    assert response.status_code == 302
    assert answer_of(fresh(request).result()) == {
        "action": "accept",
        "content": {"approve": False, "note": "not today"},
    }


def test_an_unknown_decide_value_is_not_an_answer(login, reviewer, make_request) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    assert client.post(page_url(request), {"decide": "maybe"}).status_code == 400
    assert fresh(request).status == Status.CLAIMED


def test_invalid_answers_come_back_next_to_their_fields_with_what_was_typed(
    login, reviewer, make_request
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "title": "Code", "minLength": 6},
            "count": {"type": "integer", "title": "Count", "maximum": 10},
        },
        "required": ["code", "count"],
    }
    request = make_request(requested_schema=schema)
    client = login(reviewer)
    claim(client, request)
    response = answer(client, request, "accept", code="abc", count="42")
    html = response.content.decode()
    assert response.status_code == 400
    assert 'data-error-for="code">Must be at least 6 characters.</p>' in html
    assert 'data-error-for="count">Must be at most 10.</p>' in html
    assert ">\nabc</textarea>" in html and 'value="42"' in html  # no maxLength: a textarea
    assert "Some answers need attention:" in html
    # The summary links each invalid field; inputs point at their error text.
    assert '<a href="#id_answer-code">Code: Must be at least 6 characters.</a>' in html
    assert 'aria-describedby="id_answer-code_helptext id_answer-code_error" aria-invalid="true"' in html
    assert fresh(request).status == Status.CLAIMED
    assert answer(client, request, "accept", code="abcdef", count="7").status_code == 302
    assert fresh(request).content == {"code": "abcdef", "count": 7}


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_send_no_content_and_ignore_invalid_answers(
    login, reviewer, make_request, action: str
) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    response = answer(client, request, action, note="x" * 500)
    assert response.status_code == 302
    assert answer_of(fresh(request).result()) == {"action": action}


def test_release_puts_the_request_back_in_the_queue(login, reviewer, make_request, queue) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    response = answer(client, request, "release")
    assert response["Location"] == f"/queues/{queue.slug}/"
    assert fresh(request).status == Status.PENDING and fresh(request).claimed_by is None


def test_a_reviewer_who_does_not_hold_the_claim_cannot_answer_by_posting(
    login, make_reviewer, make_request, queue
) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    for action in ("accept", "decline", "cancel", "release"):
        response = answer(login(bob), request, action, approve="true", note="from bob")
        assert response.status_code == 409, action
        assert "alice holds this request now" in response.content.decode()
    response = answer(login(bob), request, "accept", approve="true", note="from bob")
    assert 'value="from bob"' in response.content.decode()  # bob's text is not thrown away
    assert fresh(request).status == Status.CLAIMED and fresh(request).claimed_by == alice


def test_a_supervisor_sees_take_over_and_takes_the_claim_with_an_audit_row(
    login, make_reviewer, make_request, queue
) -> None:
    alice = make_reviewer("alice", queue)
    carol = make_reviewer("carol", queue, supervisor=True)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    client = login(carol)
    assert "Take over" in client.get(page_url(request)).content.decode()
    response = answer(client, request, "takeover")
    assert response.status_code == 302 and response["Location"] == page_url(request)
    assert fresh(request).claimed_by == carol
    event = RequestEvent.objects.filter(request=request, kind="taken_over").get()
    assert event.actor_user == carol and event.detail == {"previous_holder": "alice"}
    assert "You hold this request." in client.get(page_url(request)).content.decode()
    assert answer(login(alice), request, "accept", approve="true").status_code == 409


def test_a_member_cannot_take_over(login, make_reviewer, make_request, queue) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    assert answer(login(bob), request, "takeover").status_code == 403
    assert fresh(request).claimed_by == alice


def test_a_lapsed_claim_nobody_took_is_taken_again_when_the_slow_reviewer_answers(
    login, reviewer, make_request, clock
) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    clock.advance(seconds=61)
    assert transitions.release_expired_claims() == 1
    assert answer(client, request, "accept", approve="true").status_code == 302
    assert answer_of(fresh(request).result()) == {"action": "accept", "content": {"approve": True}}
    assert kinds(request)[-3:] == ["lease_expired", "claimed", "completed"]


def test_a_lapsed_claim_someone_else_took_is_reported_and_the_answer_kept(
    login, make_reviewer, make_request, queue, clock
) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    request = make_request()
    slow = login(alice)
    slow.get(page_url(request))
    clock.advance(seconds=61)
    transitions.claim_request(request.pk, user=bob)  # the lease ran out, so bob may take it
    response = answer(slow, request, "accept", approve="true", note="late")
    html = response.content.decode()
    assert response.status_code == 409
    assert "Your answer was not sent: bob holds this request now." in html
    assert 'value="late"' in html
    assert fresh(request).claimed_by == bob


def test_a_withdrawn_request_page_says_so_and_takes_no_answers(login, reviewer, make_request, agent) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    transitions.withdraw_request(request.pk, agent=agent)
    html = client.get(page_url(request)).content.decode()
    assert "The agent withdrew this request" in html
    assert 'data-notice="withdrawn"' in html
    assert 'id="answer-form"' not in html  # a closed request shows what was sent, not the form
    assert "Nothing was sent: the agent withdrew the request." in html
    response = answer(client, request, "accept", approve="true")
    assert response.status_code == 409
    assert "Your answer was not sent: The agent withdrew this request" in response.content.decode()
    assert fresh(request).status == Status.WITHDRAWN


def test_opening_an_overdue_request_shows_it_overdue_read_only_and_changes_nothing(
    login, reviewer, make_request, clock
) -> None:
    request = make_request(expires_in=10)
    clock.advance(seconds=11)
    html = login(reviewer).get(page_url(request)).content.decode()
    assert fresh(request).status == Status.PENDING  # the sweeper closes it, not the look
    assert "The deadline passed; the agent is being sent “cancel”." in html
    assert 'data-decide="approve" aria-keyshortcuts="y" disabled' in html
    transitions.expire_overdue_requests()
    html = login(reviewer).get(page_url(request)).content.decode()
    assert "The deadline passed; the agent was sent “cancel”." in html
    assert 'data-notice="expired"' in html and "sent by ReviewHub when the deadline passed" in html
    assert "data-deadline=" not in html  # no countdown on a closed request


def test_shared_drafts_prefill_the_form_and_skipped_questions_are_marked(
    login, reviewer, make_request
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.save_draft(
        request.pk, user=reviewer, question_id="approve", value=True, state=DraftState.SUBMITTED
    )
    transitions.save_draft(
        request.pk, user=reviewer, question_id="note", value=None, state=DraftState.SKIPPED
    )
    html = login(reviewer).get(page_url(request)).content.decode()
    assert 'class="question is-skipped" id="q-note"' in html
    assert "data-skip-for" not in html  # optional questions are skipped by leaving them empty


def test_who_is_asking_comes_from_the_context_and_agent_text_is_escaped(
    login, reviewer, make_request
) -> None:
    request = make_request(
        message="<script>alert(1)</script>Pay?",
        context={
            "server": "bank<b>",
            "tool": "transfer",
            "arguments": {"to": "<img src=x onerror=alert(2)>"},
            "ticket": "T-1",
        },
    )
    html = login(reviewer).get(page_url(request)).content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;Pay?" in html
    assert "bank&lt;b&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html and "<img src=x" not in html
    assert "<code>transfer</code>" in html
    assert 'sub-label">ticket</h3><pre class="json">T-1</pre>' in html


def url_request(make_request: Any, url: str) -> ElicitationRequest:
    return make_request(mode="url", url=url, requested_schema=None, message="Connect your account")


@pytest.mark.parametrize(
    ("url", "host", "href", "warnings"),
    [
        (
            "https://accounts.example.com/connect?x=1",
            "accounts.example.com",
            "https://accounts.example.com/connect?x=1",
            [],
        ),
        (
            "http://accounts.example.com/",
            "accounts.example.com",
            "http://accounts.example.com/",
            ["not HTTPS"],
        ),
        (
            "https://xn--pple-43d.com/login",
            "xn--pple-43d.com",
            "https://xn--pple-43d.com/login",
            ["punycode"],
        ),
        (
            "https://bank.example@evil.example/",
            "evil.example",
            "https://bank.example@evil.example/",
            ["not the site: it opens evil.example"],
        ),
        # The browser's reading: punycode host, and the link goes to exactly that.
        (
            "https://wiki.münchen.example/",
            "wiki.xn--mnchen-3ya.example",
            "https://wiki.xn--mnchen-3ya.example/",
            ["displays as “wiki.münchen.example”"],
        ),
        (
            "https://EXAMPLE.com:443/a/../b c",
            "example.com",
            "https://example.com/b%20c",
            [],
        ),
    ],
)
def test_an_external_url_is_shown_in_full_with_its_domain_and_warnings(
    login, reviewer, make_request, url: str, host: str, href: str, warnings: list[str]
) -> None:
    request = url_request(make_request, url)
    client = login(reviewer)
    claim(client, request)
    html = client.get(page_url(request)).content.decode()
    assert f'<mark class="url-host" id="url-host">{host}</mark>' in html
    assert f'href="{href}" target="_blank" rel="noopener noreferrer"' in html
    assert html.count("data-url-warning") == len(warnings)
    for warning in warnings:
        assert warning in html
    assert "<iframe" not in html and "<img" not in html and 'rel="prefetch"' not in html


@pytest.mark.parametrize(
    ("url", "host", "href", "warning"),
    [
        (
            "https://evil.example\\@accounts.google.com/",
            "evil.example",
            "https://evil.example/@accounts.google.com/",
            "a browser opens evil.example",
        ),
        ("http://2130706433/", "127.0.0.1", "http://127.0.0.1/", "numeric address (127.0.0.1)"),
        ("https://%65vil.example/", "evil.example", "https://evil.example/", "a browser opens evil.example"),
        ("https://acc\tounts.example/", "accounts.example", "https://accounts.example/", "a browser opens"),
    ],
)
def test_a_url_stored_before_intake_checked_it_is_shown_and_linked_as_the_browser_opens_it(
    login, reviewer, make_request, url: str, host: str, href: str, warning: str
) -> None:
    # Intake refuses these now (tests/api/test_url_intake.py); rows from before are shown the browser's way.
    request = url_request(make_request, url)
    client = login(reviewer)
    claim(client, request)
    html = client.get(page_url(request)).content.decode()
    assert f'<mark class="url-host" id="url-host">{host}</mark>' in html
    assert f'href="{href}" target="_blank"' in html
    assert warning in html
    assert "accounts.google.com</mark>" not in html


def test_a_stored_url_no_browser_can_open_is_shown_without_a_link(login, reviewer, make_request) -> None:
    request = url_request(make_request, "https://exa mple.com/")
    client = login(reviewer)
    claim(client, request)
    html = client.get(page_url(request)).content.decode()
    assert 'id="open-url"' not in html
    assert "A browser cannot open this as a web address." in html


def test_a_punycode_domain_is_also_shown_decoded(login, reviewer, make_request) -> None:
    request = url_request(make_request, "https://xn--pple-43d.com/login")
    html = login(reviewer).get(page_url(request)).content.decode()
    assert "which displays as “\u0430pple.com”" in html


def test_a_url_request_is_marked_done_declined_or_cancelled_without_content(
    login, reviewer, make_request, agent
) -> None:
    done = url_request(make_request, "https://accounts.example.com/")
    client = login(reviewer)
    client.get(page_url(done))
    transitions.report_url_flow_complete(agent, request_id=done.pk)
    assert "The agent reports the flow is complete." in client.get(page_url(done)).content.decode()
    assert answer(client, done, "accept").status_code == 302
    assert answer_of(fresh(done).result()) == {"action": "accept"}
    declined = url_request(make_request, "https://accounts.example.com/")
    client.get(page_url(declined))
    answer(client, declined, "decline")
    assert answer_of(fresh(declined).result()) == {"action": "decline"}


def test_unknown_actions_are_refused(login, reviewer, make_request) -> None:
    request = make_request()
    client = login(reviewer)
    claim(client, request)
    assert answer(client, request, "explode").status_code == 400
    assert fresh(request).status == Status.CLAIMED


def test_claiming_a_request_someone_else_holds_is_refused(login, make_reviewer, make_request, queue) -> None:
    alice = make_reviewer("alice", queue)
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    response = answer(login(bob), request, "claim")
    assert response.status_code == 409
    assert "That did not work: alice holds this request now." in response.content.decode()
    assert fresh(request).claimed_by == alice
