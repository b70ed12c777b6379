"""A process's arrival window (delivery/arrival_window.py): the first arrival after a quiet moment leaves at once,
those that follow within the window leave together in one task, a full window leaves without waiting, and what a
window holds leaves at the end of a Celery task. With a broker a create's commit puts its arrival in the window
instead of publishing a task of its own."""

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.signals import task_postrun
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.delivery import reach_tasks
from elicitation.delivery.arrival_window import Arrival, ArrivalWindow
from elicitation.models import Channel, Queue, ReachRule
from reviewhub import celery_app

WAIT_SECONDS = 30
# Longer than any test here runs: what is held leaves by the limit or a flush, never by the clock.
LONG_WINDOW = 600.0


class HandedOn:
    def __init__(self) -> None:
        self.parts: list[list[Arrival]] = []
        self.changed = threading.Condition()

    def __call__(self, part: list[Arrival]) -> None:
        with self.changed:
            self.parts.append(part)
            self.changed.notify_all()

    def wait_for(self, count: int) -> list[list[Arrival]]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.parts) >= count, WAIT_SECONDS)
            return list(self.parts)


@pytest.fixture
def handed_on() -> HandedOn:
    return HandedOn()


def test_the_first_arrival_after_a_quiet_moment_leaves_at_once(handed_on: HandedOn) -> None:
    window = ArrivalWindow(LONG_WINDOW, 25, handed_on)
    window.add("r1", 0)
    assert handed_on.wait_for(1) == [[["r1", 0]]]


def test_arrivals_within_the_window_leave_together(handed_on: HandedOn) -> None:
    window = ArrivalWindow(LONG_WINDOW, 25, handed_on)
    window.add("r1", 0)
    handed_on.wait_for(1)
    window.add("r2", 0)
    window.add("r3", 1)
    assert handed_on.parts == [[["r1", 0]]]  # held: the window that began with r1 is still open
    window.flush()
    assert handed_on.wait_for(2) == [[["r1", 0]], [["r2", 0], ["r3", 1]]]


def test_a_full_window_leaves_without_waiting_for_its_end(handed_on: HandedOn) -> None:
    window = ArrivalWindow(LONG_WINDOW, 3, handed_on)
    window.add("r0", 0)
    handed_on.wait_for(1)
    for index in range(1, 4):
        window.add(f"r{index}", 0)
    assert handed_on.wait_for(2)[1] == [["r1", 0], ["r2", 0], ["r3", 0]]


def test_a_short_window_leaves_by_itself(handed_on: HandedOn) -> None:
    window = ArrivalWindow(0.05, 25, handed_on)
    window.add("r1", 0)
    handed_on.wait_for(1)
    window.add("r2", 0)
    assert handed_on.wait_for(2)[1] == [["r2", 0]]


def test_a_window_that_could_not_hand_on_goes_on_with_the_next_arrivals(handed_on: HandedOn) -> None:
    failures = [RuntimeError("broker gone")]

    def flaky(part: list[Arrival]) -> None:
        if failures:
            raise failures.pop()
        handed_on(part)

    window = ArrivalWindow(0.05, 25, flaky)
    window.add("lost", 0)
    deadline = time.monotonic() + WAIT_SECONDS
    while failures and time.monotonic() < deadline:
        time.sleep(0.01)
    window.add("next", 0)
    assert handed_on.wait_for(1) == [[["next", 0]]]


@pytest.fixture
def with_a_broker(monkeypatch: pytest.MonkeyPatch, handed_on: HandedOn) -> Iterator[HandedOn]:
    monkeypatch.setitem(celery_app.conf, "task_always_eager", False)
    monkeypatch.setattr(reach_tasks, "arrivals", ArrivalWindow(LONG_WINDOW, 25, handed_on))
    yield handed_on


YES_NO = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def create(client: APIClient) -> str:
    body = {"queue": "payments", "message": "Deploy?", "mode": "form", "requestedSchema": YES_NO}
    response = client.post("/api/v1/requests", body, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def test_with_a_broker_a_creates_commit_puts_its_arrival_in_the_window(
    with_a_broker: HandedOn,
    queue: Queue,
    reviewer: User,
    agent_client: APIClient,
    django_capture_on_commit_callbacks: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    published: list[Any] = []
    monkeypatch.setattr(reach_tasks.notify_arrivals, "delay", lambda *args: published.append(args))
    monkeypatch.setattr(reach_tasks.notify_tier, "delay", lambda *args: published.append(args))
    ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")
    with django_capture_on_commit_callbacks(execute=True):
        first = create(agent_client)
    with django_capture_on_commit_callbacks(execute=True):
        second = create(agent_client)
    assert with_a_broker.wait_for(1) == [[[first, 0]]]
    assert published == []  # no task of its own: the window hands on
    task_postrun.send(sender=None)  # what a Celery task leaves in its window goes as it ends
    assert with_a_broker.wait_for(2)[1] == [[second, 0]]
