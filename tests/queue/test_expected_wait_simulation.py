"""A working day replayed through the real transitions, to measure how far `expectedWaitSeconds` lands from the wait
each request then had.

Seeded and synthetic: Poisson arrivals whose rate follows the day (a morning and an afternoon peak, a lunch dip;
one in ten urgent), about as many over the day as the reviewers on shift can answer (0.97 of it: the line grows at
the peaks and drains at lunch); three reviewers with exponential answer times of their own means, on shifts that
start and end, each taking the queue's next request whenever free (`claim_next`: priority, then age). Every step
goes through `create_request`, `claim_next` and `respond` under the test's clock, and the estimate at each arrival
is the one the agent's GET would give at that moment (`seconds_by_request`, through the per-queue snapshot kept a
few seconds). The day and its replay are `bench/wait_day.py`, which `python -m bench expected_wait` also runs.

The figure is the median absolute percentage error, |estimate - wait| / wait, over every estimated request. It is
set against two others from the same replay:

- the best a single number can do as an estimate of the mean: an oracle that knows every reviewer's true mean,
  the shifts to come and the arrival rate, and averages ORACLE_RUNS futures played from the state at arrival.
  Even it stays well above 0: a request a free reviewer takes at once waits one exponential answer time, whose
  median error against its own mean is 63 %, whatever the estimate;
- what the queue could say without the model: the median time to answer of its recent answers.

On this day the estimate's error is 26 %, the oracle's 22 %, the baseline's 74 %. Over five other seeds it was
23-42 % (the oracle's 20-33 %, the baseline's 64-82 %): the gap to the oracle, 2-10 points, is what rows cannot
tell (shifts about to start or end, reviewers' paces read from a few dozen exponential times). The error falls as
the line grows, since a long wait is the sum of many answers and strays less from its mean: with a tenth fewer
arrivals it was 33 % on this day and 24-47 % over the other seeds (the oracle's 22-36 %). The test holds this
day's error under 30 %, within 10 points of the oracle and under 60 % of the baseline's, and the mean estimate
within 25 % of the mean wait.
"""

import statistics
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from bench.wait_day import SHIFTS, Replay
from elicitation.models import Agent, ElicitationRequest, Queue, Status
from elicitation.queue import expected_wait
from tests.conftest import Clock

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows_clock(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The clock fixture, also behind the rows' `auto_now` columns, so the rows carry the replay's times."""
    monkeypatch.setattr("django.utils.timezone.now", clock.now)
    expected_wait.forget_snapshots()
    return clock


def test_over_a_day_the_estimate_lands_within_30_percent_near_the_best_a_mean_can_do(
    rows_clock: Clock, agent: Agent, queue: Queue, make_reviewer: Callable[..., User]
) -> None:
    # A reviewer's page renews the claim while they work; here the lease outlasts any answer instead.
    Queue.objects.filter(pk=queue.pk).update(lease_seconds=3600)
    queue.refresh_from_db()
    reviewers = [make_reviewer(shift.name, queue) for shift in SHIFTS]
    day = Replay(rows_clock, agent, queue, reviewers).run()

    assert ElicitationRequest.objects.filter(queue=queue, status=Status.COMPLETED).count() == len(day.waits)
    ours, best, queue_median = day.error(day.estimates), day.error(day.oracle), day.error(day.queue_median)
    # An estimate of the mean: over the day, the mean estimate and the mean wait agree.
    bias = statistics.fmean(day.estimates.values()) / statistics.fmean(day.waits[n] for n in day.estimates)
    behind = day.error(day.estimates, lambda n: day.ahead[n] >= 6)
    print(
        f"\nexpected wait over a day of {len(day.waits)} requests ({len(day.estimates)} estimated): median "
        f"absolute percentage error {ours:.0%} ({behind:.0%} for those behind six or more); the best a mean "
        f"can do {best:.0%}; the queue's median time to answer {queue_median:.0%}; mean estimate / mean wait "
        f"{bias:.2f}"
    )
    assert len(day.waits) >= 200
    assert len(day.estimates) >= 0.95 * len(day.waits)  # only the day's first arrivals have nothing to go on
    assert ours <= 0.30
    assert ours <= best + 0.10
    assert ours <= 0.6 * queue_median
    assert 0.8 <= bias <= 1.25
