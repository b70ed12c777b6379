"""#16 Expected wait: how far `expectedWaitSeconds` lands from the wait each request then had, over a synthetic
working day (bench/wait_day.py) replayed through the real transitions on the bench's database.

The figure is the median absolute percentage error, |estimate - wait| / wait, over every estimated request (target
≤ 30 %). Its baselines come from the same replay: the best a single number can do (an oracle that knows every
reviewer's true mean, the shifts and the arrival rate, averaging futures played from the state at arrival), and
what the queue could say without the model (the median time to answer of its recent answers). The replay moves a
clock of its own, so a day takes seconds.
"""

import statistics
from datetime import datetime
from unittest import mock

from django.contrib.auth import get_user_model
from django.utils import timezone

from bench import fixtures
from bench.harness import Context, Figure, Report
from bench.wait_day import SHIFTS, Day, Replay
from elicitation.models import Agent, Queue
from elicitation.queue import expected_wait

NAME = "expected_wait"
TITLE = "Expected wait: the estimate against the wait each request then had, over a synthetic day"
PREFIX = "bench-expected-wait"
TARGET = 0.30


class MovedClock:
    def __init__(self) -> None:
        self.current = timezone.now()

    def now(self) -> datetime:
        return self.current


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    queue = fixtures.create_queue(PREFIX + "-q")
    # A reviewer's page renews the claim while they work; here the lease outlasts any answer instead.
    Queue.objects.filter(pk=queue.pk).update(lease_seconds=3600)
    queue.refresh_from_db()
    agent = Agent.objects.get(pk=fixtures.create_agents(PREFIX, 1, queue)[0].id)
    fixtures.create_reviewers(PREFIX, len(SHIFTS), queue)
    reviewers = list(get_user_model().objects.filter(username__startswith=PREFIX).order_by("username"))
    clock = MovedClock()
    try:
        # The replay's clock stands behind "now" everywhere, the rows' auto_now columns included.
        with (
            mock.patch("elicitation.queue.clock.now", clock.now),
            mock.patch("django.utils.timezone.now", clock.now),
        ):
            expected_wait.forget_snapshots()
            day = Replay(clock, agent, queue, reviewers).run()
    finally:
        expected_wait.forget_snapshots()
        fixtures.purge(PREFIX)
    report.add(*figures(day))
    report.notes.append(
        f"A seeded day of {len(day.waits)} requests ({len(day.estimates)} estimated): arrivals with a morning and "
        f"an afternoon peak, one in ten urgent; {len(SHIFTS)} reviewers on shifts with exponential answer times; "
        "every step through create_request, claim_next and respond, on the bench's database."
    )
    return report


def figures(day: Day) -> list[Figure]:
    ours, best, queue_median = day.error(day.estimates), day.error(day.oracle), day.error(day.queue_median)
    bias = statistics.fmean(day.estimates.values()) / statistics.fmean(day.waits[n] for n in day.estimates)
    return [
        Figure(
            "median absolute error of the expected wait, over a day",
            round(ours * 100, 1),
            "%",
            f"≤ {TARGET * 100:.0f} %",
            ours <= TARGET,
            round(best * 100, 1),
            "the best a single number can do (oracle)",
            ours / best,
        ),
        Figure(
            "median absolute error of the queue's median time to answer, as an estimate",
            round(queue_median * 100, 1),
            "%",
            "reported",
            None,
            round(ours * 100, 1),
            "the expected wait",
            queue_median / ours,
        ),
        Figure("mean estimate ÷ mean wait", round(bias, 2), "x", "reported", None),
    ]
