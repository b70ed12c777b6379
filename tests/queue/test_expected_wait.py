"""The expected wait (queue/expected_wait.py): the model's arithmetic on snapshots, the snapshot as read from the
rows the transitions write, and what reading it costs."""

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User

from elicitation.models import Agent, ElicitationRequest, Queue, QueuePolicy
from elicitation.queue import expected_wait, transitions
from elicitation.queue.expected_wait import QueueSnapshot, expected_wait_seconds
from tests.conftest import FORM_SCHEMA, Clock

NOW = datetime.fromisoformat("2026-03-02T10:00:00+00:00")
LATER = NOW + timedelta(hours=2)


@pytest.fixture(autouse=True)
def _no_kept_snapshots() -> Iterator[None]:
    expected_wait.forget_snapshots()
    yield
    expected_wait.forget_snapshots()


@pytest.fixture
def rows_clock(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The clock fixture, also behind the rows' `auto_now` columns: history written by the transitions carries
    the times the test moved to."""
    monkeypatch.setattr("django.utils.timezone.now", clock.now)
    return clock


def ask(agent: Agent, queue: Queue, priority: int = 0, expires_in: int = 3600) -> ElicitationRequest:
    request, _ = transitions.create_request(
        agent=agent,
        queue_slug=queue.slug,
        message="Approve?",
        mode="form",
        requested_schema=FORM_SCHEMA,
        priority=priority,
        expires_in=expires_in,
    )
    return request


def answer(clock: Clock, request: ElicitationRequest, reviewer: User, seconds: float) -> ElicitationRequest:
    """`reviewer` claims the request now and answers it `seconds` later."""
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=seconds)
    return transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})


def answered_history(
    clock: Clock, agent: Agent, queue: Queue, reviewers: list[User], *, answers: int, service: float
) -> None:
    """`answers` requests, each answered `service` seconds after its claim, the reviewers taking turns."""
    for turn in range(answers):
        answer(clock, ask(agent, queue), reviewers[turn % len(reviewers)], service)


def at(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


def busy(
    service: float = 100.0, waiting: int = 0, holders: int = 2, answerers: int = 0, **extra: Any
) -> QueueSnapshot:
    """A queue whose reviewers answer in `service` s on average, with `waiting` requests queued a minute apart
    (the oldest ten minutes ago), `holders` reviewers holding claims and `answerers` others who just answered."""
    return QueueSnapshot(
        waiting=tuple((0, at(minutes=10 - i)) for i in range(waiting)),
        claim_holders=frozenset(range(holders)),
        recent_answerers=frozenset(range(100, 100 + answerers)),
        # Answered by someone no longer at work: every reviewer at work answers at the team's pace.
        answers=((999, service * 0.5, service * 3), (999, service * 1.5, service * 3)) * 5,
        **extra,
    )


def wait_of(snapshot: QueueSnapshot, **request: Any) -> float | None:
    fields: dict[str, Any] = {
        "priority": 0,
        "created_at": NOW,
        "holder": None,
        "deadline": LATER,
        "now": NOW,
    }
    return expected_wait_seconds(snapshot, **{**fields, **request})


# --- the model --------------------------------------------------------------------------------------------------


def test_a_request_behind_others_waits_for_their_answers_then_for_its_own() -> None:
    """Four ahead, both reviewers busy: five answers at 2 per 100 s before its claim, then 100 s of its own."""
    assert wait_of(busy(waiting=4)) == pytest.approx(5 / (2 / 100) + 100)
    assert wait_of(busy(waiting=4, holders=4)) == pytest.approx(5 / (4 / 100) + 100)


def test_only_requests_ahead_in_claim_order_count() -> None:
    """Priority first, then age: an older request of the same priority is ahead, a lower priority is not."""
    snapshot = busy(waiting=4)
    third_in_line = wait_of(snapshot, created_at=at(minutes=8, seconds=30))
    urgent = wait_of(snapshot, priority=5)
    assert third_in_line == pytest.approx(3 / (2 / 100) + 100)
    assert urgent == pytest.approx(1 / (2 / 100) + 100)


def test_a_free_reviewer_takes_it_at_once_so_it_waits_one_answer() -> None:
    """One reviewer holds a claim, another answered a minute ago and holds none: the request is next."""
    assert wait_of(busy(waiting=0, holders=1, answerers=1)) == pytest.approx(100)
    assert wait_of(busy(waiting=1, holders=1, answerers=1)) == pytest.approx(1 / (2 / 100) + 100)


def test_a_claimed_request_waits_one_mean_answer() -> None:
    assert wait_of(busy(waiting=30), holder=0, created_at=at(minutes=20)) == pytest.approx(100)


def test_each_reviewer_answers_at_their_own_pace_drawn_towards_the_teams() -> None:
    """Ten answers of 60 s from reviewer 1, ten of 180 s from reviewer 2: a team mean of 120 s; each reviewer's
    own mean counts as if three more answers had taken the team's."""
    snapshot = QueueSnapshot(
        waiting=tuple((0, at(minutes=10 - i)) for i in range(3)),
        claim_holders=frozenset({1, 2}),
        answers=((1, 60.0, 200.0), (2, 180.0, 200.0)) * 10,
    )
    fast, slow = (600 + 3 * 120) / 13, (1800 + 3 * 120) / 13
    assert snapshot.mean_answer(1) == pytest.approx(fast)
    assert snapshot.mean_answer(3) == pytest.approx(120)  # no answers of their own yet
    assert wait_of(snapshot, holder=1) == pytest.approx(fast)
    assert wait_of(snapshot, holder=2) == pytest.approx(slow)
    rate = 1 / fast + 1 / slow
    # Four answers at the two paces together, then its own, faster reviewers taking more of them.
    assert wait_of(snapshot) == pytest.approx(4 / rate + 2 / rate)


def test_higher_priority_arrivals_overtake_and_slow_the_line_and_others_do_not() -> None:
    """72 urgent arrivals in the two hours (0.01/s) take half of the reviewers' 0.02/s from a request that
    waits."""
    snapshot = busy(waiting=4, arrivals_by_priority={0: 500, 5: 72})
    assert wait_of(snapshot) == pytest.approx(5 / (2 / 100 - 0.01) + 100)
    assert wait_of(snapshot, priority=5) == pytest.approx(1 / (2 / 100) + 100)


def test_overtaken_faster_than_the_reviewers_answer_it_waits_for_its_deadline() -> None:
    snapshot = busy(waiting=4, arrivals_by_priority={9: 200})  # 0.028/s
    assert wait_of(snapshot) == (LATER - NOW).total_seconds()


def test_the_deadline_bounds_every_estimate_and_past_it_there_is_none() -> None:
    soon = NOW + timedelta(seconds=90)
    assert wait_of(busy(waiting=4), deadline=soon) == 90
    assert wait_of(busy(waiting=0, holders=0, answerers=1), deadline=soon) == 90
    assert wait_of(busy(waiting=4), deadline=NOW) is None
    assert wait_of(busy(waiting=4), deadline=at(seconds=1)) is None


def test_with_too_few_answers_it_is_what_requests_that_waited_as_long_still_waited() -> None:
    """Four answers (arrival → answer 100, 200, 300, 600 s) are too few for the model: a request that waited
    150 s is told the median of what the ones that waited longer still waited: 50, 150, 450 → 150."""
    thin = QueueSnapshot(
        claim_holders=frozenset({1}),
        answers=tuple((1, 60.0, total) for total in (100.0, 200.0, 300.0, 600.0)),
    )
    assert wait_of(thin, created_at=at(seconds=150)) == pytest.approx(150)
    assert wait_of(thin, created_at=at(seconds=700)) is None
    assert wait_of(QueueSnapshot()) is None


def test_with_nobody_at_work_it_falls_back_to_the_queues_time_to_answer() -> None:
    nobody = busy(waiting=4, holders=0, answerers=0)
    assert wait_of(nobody) == pytest.approx(300)  # the answers took 3 x 100 s from arrival


# --- the snapshot, read from the rows ---------------------------------------------------------------------------


def test_the_snapshot_sees_who_is_at_work_what_waits_and_what_arrived(
    rows_clock: Clock,
    agent: Agent,
    queue: Queue,
    make_reviewer: Callable[..., User],
) -> None:
    alice, bob, carol, dave = (make_reviewer(name, queue) for name in ("alice", "bob", "carol", "dave"))
    rows_clock.advance(hours=-5)
    answer(rows_clock, ask(agent, queue), dave, 60)  # four hours before the others: out of every window
    rows_clock.advance(hours=4)
    answered_history(rows_clock, agent, queue, [alice, bob], answers=6, service=90)
    rows_clock.advance(minutes=11)  # bob answered last, over ten minutes before the snapshot: gone
    answer(rows_clock, ask(agent, queue), alice, 30)
    lapsed = ask(agent, queue)
    transitions.claim_request(lapsed.pk, user=bob)
    rows_clock.advance(seconds=40)
    held = ask(agent, queue, priority=3)
    transitions.claim_request(held.pk, user=carol)
    rows_clock.advance(seconds=21)  # bob's lease (60 s) ran out: claimable again; carol's runs
    waiting = []
    for priority in (0, 2, 0):
        rows_clock.advance(seconds=1)
        waiting.append(ask(agent, queue, priority=priority))
    rows_clock.advance(seconds=1)
    ask(agent, queue, expires_in=1)  # overdue a second later: the sweeper will close it, nobody claims it
    rows_clock.advance(seconds=2)

    snapshot = expected_wait.read_snapshot(queue.pk, rows_clock.now())

    assert snapshot.claim_holders == {carol.pk}
    assert snapshot.recent_answerers == {alice.pk}
    assert snapshot.at_work == {alice.pk, carol.pk}
    in_claim_order = [waiting[1], lapsed, waiting[0], waiting[2]]
    assert list(snapshot.waiting) == [(-r.priority, r.created_at) for r in in_claim_order]
    # Newest first: who answered, claim → answer, arrival → answer; dave's is older than the window.
    assert snapshot.answers[0] == (alice.pk, 30.0, 30.0)
    assert [(who, seconds) for who, seconds, _ in snapshot.answers[1:]] == [
        (bob.pk, 90.0),
        (alice.pk, 90.0),
    ] * 3
    assert snapshot.arrivals_by_priority == {0: 11, 3: 1, 2: 1}


def test_requests_a_rule_answered_at_intake_never_queued_so_they_overtake_nobody(
    rows_clock: Clock, agent: Agent, queue: Queue
) -> None:
    QueuePolicy.objects.create(queue=queue, mode="scripted", unmatched="decline")
    decided = ask(agent, queue, priority=9)
    assert decided.status == "completed"
    snapshot = expected_wait.read_snapshot(queue.pk, rows_clock.now())
    assert snapshot.arrivals_by_priority == {}
    assert snapshot.answers == ()


def test_a_queue_is_read_once_per_few_seconds_whatever_the_number_of_its_requests(
    rows_clock: Clock,
    agent: Agent,
    queue: Queue,
    make_reviewer: Callable[..., User],
    django_assert_num_queries: Any,
) -> None:
    alice = make_reviewer("alice", queue)
    answered_history(rows_clock, agent, queue, [alice], answers=6, service=60)
    one = [ask(agent, queue)]
    many = []
    for _ in range(20):
        rows_clock.advance(seconds=0.1)  # one after the other
        many.append(ask(agent, queue))
    rows_clock.advance(seconds=expected_wait.SNAPSHOT_SECONDS)

    with django_assert_num_queries(3):  # open rows, the window's answers, the window's arrivals
        first = expected_wait.seconds_by_request(one)
    with django_assert_num_queries(0):
        again = expected_wait.seconds_by_request(one + many)
    rows_clock.advance(seconds=expected_wait.SNAPSHOT_SECONDS)
    with django_assert_num_queries(3):
        expected_wait.seconds_by_request(one + many)

    assert first == {one[0].pk: 60}  # alice answered a minute ago and holds no claim: it is next
    assert again[one[0].pk] == 60
    assert again[many[-1].pk] == 20 * 60 + 60  # twenty answers before its claim, then its own, a minute each
    assert set(again) == {r.pk for r in one + many}


def test_a_thin_window_reads_the_day_for_answers(
    rows_clock: Clock,
    agent: Agent,
    queue: Queue,
    make_reviewer: Callable[..., User],
    django_assert_num_queries: Any,
) -> None:
    alice = make_reviewer("alice", queue)
    answered_history(rows_clock, agent, queue, [alice], answers=6, service=60)
    rows_clock.advance(hours=4)
    waiting = ask(agent, queue)
    with django_assert_num_queries(4):
        snapshot = expected_wait.queue_snapshot(queue, rows_clock.now())
    assert [seconds for _, seconds, _ in snapshot.answers] == [60.0] * 6
    assert snapshot.at_work == set()
    # Nobody at work: the day's time to answer (each waited only its own minute).
    assert expected_wait.seconds_by_request([waiting]) == {waiting.pk: 60}


def test_closed_requests_and_requests_without_history_get_no_estimate(
    rows_clock: Clock, agent: Agent, queue: Queue, make_reviewer: Callable[..., User]
) -> None:
    alice = make_reviewer("alice", queue)
    lonely = ask(agent, queue)
    assert expected_wait.seconds_by_request([lonely]) == {}
    answered = answer(rows_clock, lonely, alice, 30)
    assert expected_wait.seconds_by_request([answered]) == {}
