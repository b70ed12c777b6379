"""The process's notice senders (delivery/background.py): jobs run off the submitting thread, each channel on
threads of its own (a held Slack job holds no e-mail), a full backlog drops a job and says so instead of blocking,
a failing job is logged and the pool goes on, and each job leaves no database connection behind."""

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, transaction

from elicitation.delivery import background
from elicitation.models import Queue

WAIT_SECONDS = 30


@pytest.fixture
def one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One sender thread, so jobs run in the order they were submitted; it finishes them before the test ends."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reviewhub-notices-test")
    monkeypatch.setitem(background._pools, background.TASKS, pool)
    yield
    pool.shutdown(wait=True)


def test_a_job_runs_on_a_sender_thread_while_the_caller_goes_on() -> None:
    release, ran_on = threading.Event(), []

    def job() -> None:
        ran_on.append(threading.current_thread().name)
        release.wait(WAIT_SECONDS)

    assert background.submit(job) is True
    # Back here while the job is still held: the caller never waited for it.
    assert background.unfinished() >= 1
    release.set()
    assert wait_until(lambda: ran_on != [] and background.unfinished() == 0)
    assert ran_on[0].startswith("reviewhub-notices")


def test_a_job_held_on_one_channels_threads_does_not_hold_another_channels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One thread per channel: a Slack that hangs holds Slack's threads, never the e-mails'.
    monkeypatch.setattr(background, "SENDERS_PER_CHANNEL", 1)
    monkeypatch.setattr(background, "_pools", {})
    release, ran_on = threading.Event(), list[str]()
    try:
        assert background.submit(release.wait, WAIT_SECONDS, lane="slack") is True
        assert background.submit(lambda: ran_on.append(threading.current_thread().name), lane="email") is True
        assert wait_until(lambda: ran_on != [])
        assert ran_on[0].startswith("reviewhub-notices-email")
        assert background.unfinished() >= 1  # Slack's job is still held
    finally:
        release.set()
    assert wait_until(lambda: background.unfinished() == 0)
    for pool in background._pools.values():
        pool.shutdown(wait=True)


@pytest.mark.django_db
def test_inside_a_transaction_a_job_runs_in_place() -> None:
    # Another thread's connection could not see what this transaction wrote: the job runs here, now.
    ran_on: list[int] = []
    with transaction.atomic():
        Queue.objects.create(slug="uncommitted", name="Uncommitted")
        assert background.submit(lambda: ran_on.append(threading.get_ident())) is True
        assert ran_on == [threading.get_ident()]


def test_a_full_backlog_drops_the_job_and_says_so(
    monkeypatch: pytest.MonkeyPatch, one_thread: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(background, "_room", threading.BoundedSemaphore(1))
    release, ran = threading.Event(), list[str]()
    assert background.submit(release.wait, WAIT_SECONDS) is True
    with caplog.at_level(logging.WARNING, logger="elicitation.delivery.background"):
        assert background.submit(ran.append, "dropped") is False
    assert "backlog full" in caplog.text
    release.set()
    assert wait_until(lambda: background.unfinished() == 0)
    assert background.submit(ran.append, "taken") is True
    assert wait_until(lambda: ran == ["taken"])


def test_a_failing_job_is_logged_and_the_next_one_runs(
    one_thread: None, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("peer exploded")

    with caplog.at_level(logging.ERROR, logger="elicitation.delivery.background"):
        background.submit(broken)
        background.submit(ran.append, "next")
        assert wait_until(lambda: ran == ["next"])
    assert "peer exploded" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_each_job_leaves_no_database_connection_behind(one_thread: None) -> None:
    seen: list[Any] = []

    def query() -> None:
        seen.append(Queue.objects.count())

    def look_at_connection() -> None:
        seen.append(connection.connection)  # the same thread as `query`: one thread in this pool

    background.submit(query)
    background.submit(look_at_connection)
    assert wait_until(lambda: len(seen) == 2)
    assert seen == [0, None]


def wait_until(condition: Any, seconds: float = WAIT_SECONDS) -> bool:
    give_up = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True
