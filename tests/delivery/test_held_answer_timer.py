"""A held answer's timer: set after the hold commits, for its `send_at`; a Celery countdown with a broker, a timer
thread handing the send to the background senders without one; a broker outage leaves it to the sweep."""

from typing import Any

import pytest
from django.conf import settings

from elicitation.delivery import held_answers


def test_with_a_broker_the_send_is_a_celery_countdown(monkeypatch: pytest.MonkeyPatch) -> None:
    queued: list[tuple[Any, float]] = []
    monkeypatch.setitem(held_answers.send_held_answer.app.conf, "task_always_eager", False)
    monkeypatch.setattr(
        held_answers.send_held_answer, "apply_async", lambda args, countdown: queued.append((args, countdown))
    )
    held_answers.schedule("4f1c", 5.05)
    assert queued == [(("4f1c",), 5.05)]


def test_a_broker_outage_is_logged_and_left_to_the_sweep(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setitem(held_answers.send_held_answer.app.conf, "task_always_eager", False)
    monkeypatch.setattr(held_answers.send_held_answer, "apply_async", refuse)
    held_answers.schedule("4f1c", 5.0)
    assert "the sweep will send it" in caplog.text


def test_embedded_the_send_waits_on_a_timer_then_runs_on_the_background_senders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timers: list[Any] = []

    class FakeTimer:
        def __init__(self, delay: float, function: Any, args: tuple[Any, ...]) -> None:
            self.delay, self.function, self.args, self.daemon, self.started = (
                delay,
                function,
                args,
                False,
                False,
            )
            timers.append(self)

        def start(self) -> None:
            self.started = True

    submitted: list[tuple[Any, ...]] = []
    monkeypatch.setitem(held_answers.send_held_answer.app.conf, "task_always_eager", True)
    monkeypatch.setattr(held_answers.threading, "Timer", FakeTimer)
    monkeypatch.setattr(held_answers.background, "submit", lambda job, *args: submitted.append((job, *args)))
    held_answers.schedule("4f1c", 5.05)
    (timer,) = timers
    assert (timer.delay, timer.started, timer.daemon) == (5.05, True, True)
    assert submitted == []  # nothing before the window closes
    timer.function(*timer.args)
    assert submitted == [(held_answers._send, "4f1c")]


def test_the_sweep_that_sends_due_answers_is_on_the_beat_schedule() -> None:
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "elicitation.delivery.held_answers.send_due_answers" in tasks
