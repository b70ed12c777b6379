"""The embedded deployment's in-process sweeper: it really runs without Celery, starts once, and stops cleanly."""

import asyncio
import time
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from celery.schedules import crontab
from django.db import connections

from elicitation.models import ElicitationRequest, Status
from elicitation.ops import sweeper
from elicitation.queue import transitions


async def _wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await sync_to_async(predicate)():
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.django_db(transaction=True)
async def test_a_started_sweeper_expires_an_overdue_request_and_releases_a_lapsed_lease(
    make_request, reviewer, clock, monkeypatch
) -> None:
    # No Celery anywhere on this path: a sweep that tried to enqueue a task would fail loudly.
    monkeypatch.setattr("elicitation.ops.tasks.expire_overdue_requests.delay", None)
    overdue = await sync_to_async(make_request)(expires_in=5)
    lapsed = await sync_to_async(make_request)()
    await sync_to_async(transitions.claim_request)(lapsed.pk, user=reviewer)
    clock.advance(seconds=61)

    running = sweeper.Sweeper(interval=0.1).start()
    try:
        assert await _wait_for(lambda: ElicitationRequest.objects.get(pk=overdue.pk).status == Status.EXPIRED)
        assert await _wait_for(lambda: ElicitationRequest.objects.get(pk=lapsed.pk).status == Status.PENDING)
        runs = running.runs
        assert await _wait_for(lambda: running.runs >= runs + 2)
    finally:
        await running.stop()

    assert not running.running
    # Repeated sweeps changed nothing more: one expiry, one lease return in the audit.
    expired = await sync_to_async(ElicitationRequest.objects.get)(pk=overdue.pk)
    assert await sync_to_async(expired.events.filter(kind="expired").count)() == 1
    assert await sync_to_async(lapsed.events.filter(kind="lease_expired").count)() == 1
    await sync_to_async(connections.close_all)()  # the helper thread's connection, so the test DB can go


async def test_stop_waits_for_the_sweep_in_progress_then_no_more_run() -> None:
    calls: list[float] = []

    def slow_sweep() -> int:
        calls.append(time.monotonic())
        time.sleep(0.2)
        return 0

    running = sweeper.Sweeper(interval=0.05, sweeps={"slow": slow_sweep}).start()
    await asyncio.sleep(0.1)
    await running.stop()
    finished = len(calls)
    await asyncio.sleep(0.3)

    assert finished >= 1
    assert len(calls) == finished
    assert running.runs == finished


async def test_starting_twice_runs_one_loop() -> None:
    running = sweeper.Sweeper(interval=10, sweeps={"noop": lambda: 0}).start()
    task = running._task
    assert running.start() is running
    assert running._task is task
    await running.stop()


def test_one_failing_sweep_does_not_stop_the_others() -> None:
    def broken() -> int:
        raise RuntimeError("boom")

    assert sweeper.run_sweeps_once({"broken": broken, "fine": lambda: 3}) == {"broken": -1, "fine": 3}


def test_the_in_process_sweeps_are_exactly_the_beat_schedule(settings) -> None:
    beat_tasks = [entry["task"].rsplit(".", 1)[-1] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    names = list(sweeper.registered_sweeps())
    assert names == beat_tasks
    assert {"expire_overdue_requests", "release_expired_claims", "send_notification_digests"} <= set(names)


def test_each_sweep_runs_as_often_as_beat_runs_it_scaled_to_the_interval(settings) -> None:
    settings.CELERY_BEAT_SCHEDULE = {
        "often": {"task": "tasks.often", "schedule": 5.0},
        "sometimes": {"task": "tasks.sometimes", "schedule": 15.0},
        "rarely": {"task": "tasks.rarely", "schedule": timedelta(minutes=1)},
        "on the hour": {"task": "tasks.hourly", "schedule": crontab(minute=0)},
    }
    names = ["often", "sometimes", "rarely", "hourly", "unscheduled"]

    assert sweeper.sweep_periods(5, names) == {
        "often": 5,
        "sometimes": 15,
        "rarely": 60,
        "hourly": 5,
        "unscheduled": 5,
    }
    assert sweeper.sweep_periods(1, names) == {
        "often": 1,
        "sometimes": 3,
        "rarely": 12,
        "hourly": 1,
        "unscheduled": 1,
    }


async def test_a_started_sweeper_runs_a_task_beat_runs_less_often_only_when_it_is_due(
    settings, monkeypatch
) -> None:
    runs: dict[str, list[float]] = {"often": [], "rarely": []}

    def sweep(name: str) -> int:
        runs[name].append(time.monotonic())
        return 0

    monkeypatch.setattr(sweeper, "registered_sweeps", lambda: {name: partial(sweep, name) for name in runs})
    settings.CELERY_BEAT_SCHEDULE = {
        "often": {"task": "tasks.often", "schedule": 5.0},
        "rarely": {"task": "tasks.rarely", "schedule": 50.0},
    }
    running = sweeper.Sweeper(interval=0.05).start()  # "rarely" every 0.5 s
    try:
        assert await _wait_for(lambda: len(runs["rarely"]) >= 2)
    finally:
        await running.stop()

    first, second = runs["rarely"][:2]
    assert second - first >= 0.45  # all sweeps every interval ran it 0.05 s apart
    assert len(runs["often"]) >= len(runs["rarely"])


def test_a_beat_entry_naming_a_missing_task_is_skipped(settings) -> None:
    settings.CELERY_BEAT_SCHEDULE = {
        **settings.CELERY_BEAT_SCHEDULE,
        "ghost": {"task": "elicitation.ops.tasks.no_such_task", "schedule": 5.0},
    }
    assert "no_such_task" not in sweeper.registered_sweeps()


async def test_it_is_off_when_the_setting_is_off(settings) -> None:
    settings.PERIODIC_SWEEPS_IN_PROCESS = False
    assert sweeper.ensure_started() is None


async def test_the_asgi_app_starts_it_on_lifespan_startup_and_stops_it_on_shutdown(
    settings, monkeypatch
) -> None:
    monkeypatch.setattr(sweeper, "registered_sweeps", lambda: {"noop": lambda: 0})
    settings.PERIODIC_SWEEPS_IN_PROCESS = True
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("lifespan must not reach the Channels router")

    app = sweeper.with_periodic_sweeps(inner)
    await inbox.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, send))
    await asyncio.sleep(0.05)
    process_sweeper = sweeper._process_sweeper
    assert process_sweeper is not None and process_sweeper.running
    # A later connection on the same loop reuses it rather than starting a second one.
    assert sweeper.ensure_started() is process_sweeper

    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, timeout=5)

    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    assert not process_sweeper.running
    assert sweeper._process_sweeper is None


async def test_daphne_without_lifespan_starts_it_with_the_first_connection(settings, monkeypatch) -> None:
    monkeypatch.setattr(sweeper, "registered_sweeps", lambda: {"noop": lambda: 0})
    settings.PERIODIC_SWEEPS_IN_PROCESS = True
    seen: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    app = sweeper.with_periodic_sweeps(inner)
    try:
        await app({"type": "http"}, None, None)  # type: ignore[arg-type]
        first = sweeper._process_sweeper
        await app({"type": "websocket"}, None, None)  # type: ignore[arg-type]
        assert seen == ["http", "websocket"]
        assert first is not None and first.running
        assert sweeper._process_sweeper is first
    finally:
        await sweeper.stop_process_sweeper()
