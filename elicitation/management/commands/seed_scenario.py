"""A few days of realistic review-queue history, for the metrics dashboard, demos and screenshots.

The history is played, not faked: a simulated clock drives the real services (create, claim, heartbeat, respond,
withdraw) and the real sweeps (deadline expiry with escalation, lease return), so every row and audit event is one
the live system would have written. Arrivals follow a working-day rhythm; some reviewers abandon claims, some
requests are withdrawn, some miss their deadline.
"""

import heapq
import itertools
import random
from argparse import ArgumentTypeError
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from elicitation.models import Agent, ElicitationRequest, ExpiryOutcome, Queue, Status
from elicitation.queue import accounts, clock, transitions
from elicitation.queue.errors import InvalidTransition

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve?"},
        "note": {"type": "string", "title": "Note for the agent", "maxLength": 200},
    },
    "required": ["approve"],
}
SWEEP_EVERY = timedelta(minutes=2)
PASSWORD = "scenario"


@dataclass(frozen=True)
class QueueSpec:
    slug: str
    name: str
    deadline: int  # seconds
    lease: int
    outcome: str
    escalate_to: str | None
    threshold: int | None
    per_hour: float  # arrivals at the busiest hour
    claim_minutes: float  # mean wait for a reviewer, working hours
    work_minutes: float  # mean time to answer once claimed
    accept: float
    decline: float
    reviewers: tuple[str, ...]
    agent: str
    message: str


SPECS = (
    QueueSpec(
        "payments",
        "Payments",
        1800,
        300,
        ExpiryOutcome.CANCEL,
        None,
        8,
        7,
        4,
        3,
        0.74,
        0.2,
        ("ana", "ben", "chloe"),
        "billing-bot",
        "Approve a refund of {amount} EUR to customer #{n}?",
    ),
    QueueSpec(
        "security",
        "Security review",
        2700,
        600,
        ExpiryOutcome.ESCALATE,
        "security-oncall",
        None,
        3,
        14,
        8,
        0.52,
        0.4,
        ("dmitri", "eve"),
        "deploy-guard",
        "Allow the deploy agent to run a migration on db-{n}?",
    ),
    QueueSpec(
        "security-oncall",
        "Security on-call",
        1200,
        300,
        ExpiryOutcome.DECLINE,
        None,
        None,
        0.2,
        6,
        5,
        0.45,
        0.5,
        ("eve", "farah"),
        "deploy-guard",
        "Allow an emergency config change on edge-{n}?",
    ),
    QueueSpec(
        "support",
        "Customer support",
        14400,
        900,
        ExpiryOutcome.CANCEL,
        None,
        7,
        9,
        30,
        6,
        0.8,
        0.12,
        ("ana", "gus", "hana"),
        "support-copilot",
        "Send the drafted reply to ticket #{n}?",
    ),
)
SUPERVISOR = "sam"


def busyness(moment: datetime) -> float:
    """Relative arrival rate by UTC hour and weekday: a working day with a lunch dip, quiet nights and weekends."""
    hour = moment.hour + moment.minute / 60
    if 8 <= hour < 18:
        level = 1.0 if not 12 <= hour < 13 else 0.7
    elif 6 <= hour < 8 or 18 <= hour < 21:
        level = 0.45
    else:
        level = 0.12
    return level * (0.35 if moment.weekday() >= 5 else 1.0)


@contextmanager
def simulated_clock() -> Iterator[Callable[[datetime], None]]:
    """Point elicitation.queue.clock at a settable time for the duration; restored however the block ends."""
    state: dict[str, datetime] = {}
    real = clock.now
    clock.now = lambda: state["now"]

    def set_time(moment: datetime) -> None:
        state["now"] = moment

    try:
        yield set_time
    finally:
        clock.now = real


class Scenario:
    def __init__(
        self, days: float, seed: int, scale: float, end: datetime, out: Callable[[str], None]
    ) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - a reproducible story, not a secret
        self.start, self.end = end - timedelta(days=days), end
        self.scale = scale
        self.out = out
        self.plan: list[tuple[datetime, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.users: dict[str, Any] = {}
        self.queues: dict[str, Queue] = {}
        self.agents: dict[str, Agent] = {}
        self.planned: dict[Any, str] = {}  # request id -> the queue its reviewers' steps were planned for
        self.counter = itertools.count(1000)

    # --- setup -------------------------------------------------------------------------------------------------

    def set_up(self) -> None:
        user_model = get_user_model()
        names = {SUPERVISOR, *(name for spec in SPECS for name in spec.reviewers)}
        for name in sorted(names):
            user, created = user_model.objects.get_or_create(
                username=name, defaults={"first_name": name.title()}
            )
            if created:
                user.set_password(PASSWORD)
                user.save()
            self.users[name] = user
        for spec in SPECS:
            queue, _ = Queue.objects.update_or_create(
                slug=spec.slug,
                defaults={
                    "name": spec.name,
                    "default_deadline_seconds": spec.deadline,
                    "lease_seconds": spec.lease,
                    "priority_threshold": spec.threshold,
                },
            )
            self.queues[spec.slug] = queue
        for spec in SPECS:  # outcomes second: an escalation target must exist first
            queue = self.queues[spec.slug]
            queue.expiry_outcome = spec.outcome
            queue.escalation_queue = self.queues[spec.escalate_to] if spec.escalate_to else None
            queue.save()
            queue.members.set([self.users[name] for name in spec.reviewers])
            queue.supervisors.add(self.users[SUPERVISOR])
        for spec in SPECS:
            agent = Agent.objects.filter(name=spec.agent).first()
            if agent is None:
                agent, _ = accounts.create_agent(spec.agent, queue_slugs=[spec.slug])
            agent.queues.add(self.queues[spec.slug])
            self.agents[spec.agent] = agent

    # --- the event loop ----------------------------------------------------------------------------------------

    def at(self, moment: datetime, action: Callable[[], None]) -> None:
        if moment < self.end:
            heapq.heappush(self.plan, (moment, next(self.order), action))

    def run(self, set_time: Callable[[datetime], None]) -> None:
        for spec in SPECS:
            self.schedule_arrivals(spec)
        sweep = self.start + SWEEP_EVERY
        while sweep < self.end:
            self.at(sweep, self.sweep_at(sweep))
            sweep += SWEEP_EVERY
        while self.plan:
            moment, _, action = heapq.heappop(self.plan)
            set_time(moment)
            # The request may have moved on (expired, withdrawn) before this step, as in real life.
            with suppress(InvalidTransition):
                action()
        set_time(self.end)
        transitions.expire_overdue_requests(self.end)
        transitions.release_expired_claims(self.end)

    def schedule_arrivals(self, spec: QueueSpec) -> None:
        # Thinning: candidate arrivals at the peak rate, each kept with the hour's relative busyness.
        peak = spec.per_hour * self.scale / 3600
        moment = self.start
        while True:
            moment += timedelta(seconds=self.rng.expovariate(peak))
            if moment >= self.end:
                return
            if self.rng.random() < busyness(moment):
                self.at(moment, self.arrival(spec, moment))

    def sweep_at(self, moment: datetime) -> Callable[[], None]:
        targets = [spec.escalate_to for spec in SPECS if spec.escalate_to]

        def sweep() -> None:
            transitions.expire_overdue_requests(moment)
            transitions.release_expired_claims(moment)
            # Escalated requests arrive in their new queue: plan what its reviewers do with them.
            arrived = ElicitationRequest.objects.filter(status=Status.PENDING, queue__slug__in=targets)
            for request_id, slug, deadline in arrived.values_list("pk", "queue__slug", "deadline"):
                if self.planned.get(request_id) != slug:
                    self.planned[request_id] = slug
                    self.plan_review(self.spec(slug), request_id, moment, deadline)

        return sweep

    @staticmethod
    def spec(slug: str) -> QueueSpec:
        return next(spec for spec in SPECS if spec.slug == slug)

    def arrival(self, spec: QueueSpec, moment: datetime) -> Callable[[], None]:
        def arrive() -> None:
            n = next(self.counter)
            priority = self.rng.choices([0, 2, 5, 8, 9], weights=[40, 25, 20, 10, 5])[0]
            request, _ = transitions.create_request(
                agent=self.agents[spec.agent],
                queue_slug=spec.slug,
                message=spec.message.format(amount=self.rng.randint(12, 2400), n=n),
                mode="form",
                requested_schema=SCHEMA,
                context={
                    "server": f"{spec.agent}-mcp",
                    "tool": spec.slug.replace("-", "_"),
                    "arguments": {"n": n},
                },
                priority=priority,
            )
            # created_at is auto_now_add (wall clock); the history needs the simulated arrival time.
            ElicitationRequest.objects.filter(pk=request.pk).update(created_at=moment, updated_at=moment)
            self.planned[request.pk] = spec.slug
            if self.rng.random() < 0.05:
                self.at(moment + timedelta(minutes=self.rng.uniform(1, 12)), self.withdraw(request.pk, spec))
            self.plan_review(spec, request.pk, moment, request.deadline)

        return arrive

    def plan_review(self, spec: QueueSpec, request_id: Any, since: datetime, deadline: datetime) -> None:
        # Nights and weekends are slower to pick up.
        slowdown = 1 / max(busyness(since), 0.2)
        wait = timedelta(minutes=self.rng.expovariate(1 / (spec.claim_minutes * slowdown)))
        if since + wait < deadline:
            reviewer = self.rng.choice(spec.reviewers)
            self.at(since + wait, self.claim(spec, request_id, reviewer))

    def claim(self, spec: QueueSpec, request_id: Any, reviewer: str) -> Callable[[], None]:
        def claim() -> None:
            request = transitions.claim_request(request_id, user=self.users[reviewer])
            now = clock.now()
            if self.rng.random() < 0.08:
                # Walks away: the lease lapses, the sweep returns it, someone else picks it up later.
                others = [name for name in spec.reviewers if name != reviewer] or [reviewer]
                later = now + timedelta(seconds=spec.lease) + timedelta(minutes=self.rng.uniform(2, 10))
                self.at(later, self.claim(spec, request_id, self.rng.choice(others)))
                return
            work = timedelta(minutes=self.rng.expovariate(1 / spec.work_minutes) + 0.3)
            renew = now + timedelta(seconds=spec.lease * 0.6)
            while renew < now + work:
                self.at(renew, self.heartbeat(request_id, reviewer))
                renew += timedelta(seconds=spec.lease * 0.6)
            if now + work < request.deadline:
                self.at(now + work, self.answer(spec, request_id, reviewer))

        return claim

    def heartbeat(self, request_id: Any, reviewer: str) -> Callable[[], None]:
        def heartbeat() -> None:
            transitions.renew_claim(request_id, user=self.users[reviewer])

        return heartbeat

    def answer(self, spec: QueueSpec, request_id: Any, reviewer: str) -> Callable[[], None]:
        def answer() -> None:
            roll = self.rng.random()
            if roll < spec.accept:
                note = self.rng.choice(["", "Checked with the account owner.", "Within policy.", "OK once."])
                content = {"approve": True, **({"note": note} if note else {})}
                transitions.respond(request_id, user=self.users[reviewer], action="accept", content=content)
            elif roll < spec.accept + spec.decline:
                transitions.respond(request_id, user=self.users[reviewer], action="decline")
            else:
                transitions.respond(request_id, user=self.users[reviewer], action="cancel")

        return answer

    def withdraw(self, request_id: Any, spec: QueueSpec) -> Callable[[], None]:
        def withdraw() -> None:
            transitions.withdraw_request(request_id, agent=self.agents[spec.agent])

        return withdraw


def _moment(raw: str) -> datetime:
    moment = parse_datetime(raw)
    if moment is None:
        raise ArgumentTypeError(f"{raw!r} is not an ISO date-time")
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


class Command(BaseCommand):
    help = (
        "Play a few days of realistic history through the real services (for the metrics dashboard). "
        f"Reviewers and the supervisor '{SUPERVISOR}' sign in with the password '{PASSWORD}'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days", type=float, default=3.0, help="How much history, ending now (default 3)."
        )
        parser.add_argument(
            "--seed", type=int, default=7, help="Random seed: the same seed plays the same story."
        )
        parser.add_argument(
            "--scale", type=float, default=1.0, help="Multiply every arrival rate (default 1)."
        )
        parser.add_argument(
            "--end", type=_moment, help="When the history ends (ISO date-time, UTC if naive); default now."
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Delete the scenario queues' requests first (demo data only!).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs = [spec.slug for spec in SPECS]
        existing = ElicitationRequest.objects.filter(queue__slug__in=slugs)
        if existing.exists():
            if not options["reset"]:
                self.stdout.write("The scenario is already seeded; run with --reset to play it again.")
                return
            existing.delete()
        end = options["end"] or clock.now()
        if isinstance(end, str):  # call_command(end=...) skips argparse's conversion
            end = _moment(end)
        scenario = Scenario(options["days"], options["seed"], options["scale"], end, self.stdout.write)
        with transaction.atomic():
            scenario.set_up()
        # One transaction: thousands of small commits would make SQLite take minutes instead of seconds.
        with simulated_clock() as set_time, transaction.atomic():
            scenario.run(set_time)
        requests = ElicitationRequest.objects.filter(queue__slug__in=slugs)
        by_status = {status: requests.filter(status=status).count() for status in Status.values}
        self.stdout.write(
            f"Played {options['days']:g} day(s): {requests.count()} requests "
            + ", ".join(f"{n} {status}" for status, n in by_status.items() if n)
            + "."
        )
        self.stdout.write(f"Supervisor login: {SUPERVISOR} / {PASSWORD}  (dashboard: /dashboard/)")
