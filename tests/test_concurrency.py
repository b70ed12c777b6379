"""Races with real threads and real connections: every request claimed exactly once, one answer wins."""

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import close_old_connections, connection

from elicitation.models import ElicitationRequest, Queue, RequestEvent, Status
from elicitation.queue import transitions
from elicitation.queue.errors import InvalidTransition

pytestmark = pytest.mark.django_db(transaction=True)


def run_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    start = threading.Barrier(count)

    def runner(index: int) -> None:
        try:
            start.wait()
            results[index] = work(index)
        except Exception as exc:  # a thread's failure is part of the result
            results[index] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def claimer_count() -> int:
    return 16 if connection.vendor == "postgresql" else 4


def test_concurrent_claimers_claim_every_request_exactly_once(
    make_request: Any, make_reviewer: Any, queue: Queue
) -> None:
    total = 60
    ids = {make_request().pk for _ in range(total)}
    reviewers = [make_reviewer(f"r{i}", queue) for i in range(claimer_count())]

    def claim_until_empty(index: int) -> list[Any]:
        mine = []
        while True:
            claimed = transitions.claim_next(queue, user=reviewers[index])
            if claimed is None:
                return mine
            mine.append(claimed.pk)

    results = run_threads(len(reviewers), claim_until_empty)
    assert not [r for r in results if isinstance(r, Exception)], results
    claimed = [pk for batch in results for pk in batch]
    assert Counter(claimed).most_common(1)[0][1] == 1  # nobody claimed twice
    assert set(claimed) == ids  # nothing lost
    assert ElicitationRequest.objects.filter(status=Status.CLAIMED).count() == total
    assert RequestEvent.objects.filter(kind="claimed").count() == total


def test_two_reviewers_answering_at_once_one_wins_one_conflicts(make_request: Any, reviewer: Any) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)

    def answer(index: int) -> str:
        action = "accept" if index == 0 else "decline"
        content = {"approve": True} if index == 0 else None
        return transitions.respond(request.pk, user=reviewer, action=action, content=content).action

    results = run_threads(2, answer)
    winners = [r for r in results if isinstance(r, str)]
    losers = [r for r in results if isinstance(r, InvalidTransition)]
    assert (len(winners), len(losers)) == (1, 1), results
    stored = ElicitationRequest.objects.get(pk=request.pk)
    assert stored.action == winners[0]
    assert RequestEvent.objects.filter(request=request, kind="completed").count() == 1
    assert stored.agent_events.count() == 1


def test_answer_racing_withdrawal_leaves_one_outcome(make_request: Any, reviewer: Any, agent: Any) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)

    def act(index: int) -> str:
        if index == 0:
            return transitions.respond(request.pk, user=reviewer, action="decline").status
        return transitions.withdraw_request(request.pk, agent=agent).status

    results = run_threads(2, act)
    assert sum(isinstance(r, InvalidTransition) for r in results) == 1, results
    stored = ElicitationRequest.objects.get(pk=request.pk)
    assert stored.status in (Status.COMPLETED, Status.WITHDRAWN)
    assert stored.agent_events.count() == 1


def test_idempotent_creates_racing_make_one_request(agent: Any, queue: Queue) -> None:
    def create(index: int) -> Any:
        request, _ = transitions.create_request(
            agent=agent,
            queue_slug=queue.slug,
            message="same",
            mode="form",
            requested_schema={"type": "object", "properties": {}},
            idempotency_key="same-key",
            fingerprint="same-body",
        )
        return request.pk

    results = run_threads(claimer_count(), create)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len(set(results)) == 1
    assert ElicitationRequest.objects.count() == 1


@pytest.mark.services
def test_claim_next_skips_a_row_another_transaction_holds(
    make_request: Any, reviewer: Any, queue: Queue, clock: Any
) -> None:
    """On PostgreSQL a claimer never waits on a locked row: it takes the next one (SKIP LOCKED)."""
    from django.db import transaction

    first = make_request(priority=9)
    second = make_request(priority=1)
    locked = threading.Event()
    release = threading.Event()

    def hold_lock() -> None:
        try:
            with transaction.atomic():
                ElicitationRequest.objects.select_for_update().get(pk=first.pk)
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        claimed = transitions.claim_next(queue, user=reviewer)
    finally:
        release.set()
        holder.join(timeout=30)
    assert connection.vendor == "postgresql"
    assert claimed is not None and claimed.pk == second.pk
