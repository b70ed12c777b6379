"""The in-process periodic sweep of the embedded deployment: deadlines, leases, notification digests and every
other task of the beat schedule (flow purging, webhook retries).

In the services deployment Celery beat runs these (settings.CELERY_BEAT_SCHEDULE). The embedded default has no
beat, so every ASGI process runs the same tasks itself when `PERIODIC_SWEEPS_IN_PROCESS` is on, each as often as
beat would: the most frequent every SWEEP_INTERVAL_SECONDS, the others in their schedule's proportion (beat's 15-s
tasks every 15 s at the default 5-s interval, every 3 s at 1 s). Running all of them every interval made an idle
embedded process spend ~0.7 % of a core on sweeps (bench/findings.md, "idle server process").

Why an asyncio task, started by the ASGI app at lifespan startup or on its first event:
- uvicorn (`make run`, the image) sends lifespan startup; `with_periodic_sweeps` answers it (Channels' router would
  reject it) and starts the sweep there. daphne (`manage.py runserver`'s server) sends no lifespan events, so
  there the first connection of any kind starts it: a page, an API call, a socket, or `/healthz`.
- It must run on the server's event loop, not in a thread of its own: the sweeps push to the channel layer, and
  the embedded in-memory layer is only safe to use from that loop. The sweep functions are synchronous ORM code,
  run through `sync_to_async`, whose worker thread hands those pushes back to the loop.
- Starting at import time instead would also start it in every test run and management command that imports
  the ASGI module. Tests turn it off with the setting and start a `Sweeper` themselves where they need one.

Each sweep is idempotent (a second run changes nothing), so several processes sweeping the same database is
harmless; the guarded UPDATEs decide who does the work.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import timedelta
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)

SweepFunction = Callable[[], int]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def registered_sweeps() -> dict[str, SweepFunction]:
    """Every task in CELERY_BEAT_SCHEDULE: the embedded deployment sweeps exactly
    what Celery beat runs in the services deployment, so the two cannot drift apart."""
    sweeps: dict[str, SweepFunction] = {}
    schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    for entry in schedule.values():
        path: str = entry["task"]
        try:
            task = import_string(path)
        except ImportError:
            logger.error("beat task %s does not exist; the in-process sweep skips it", path)
            continue
        args, kwargs = tuple(entry.get("args", ())), dict(entry.get("kwargs", {}))
        # Calling a Celery task object runs its body here and now, in this process: no broker involved.
        sweeps[path.rsplit(".", 1)[-1]] = partial(task, *args, **kwargs)
    return sweeps


def beat_periods() -> dict[str, float]:
    """Seconds between runs of each task of the beat schedule, by name; one whose schedule is not a number of
    seconds (a crontab) is left out, and runs every sweep."""
    periods: dict[str, float] = {}
    schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    for entry in schedule.values():
        every = entry["schedule"]
        seconds = every.total_seconds() if isinstance(every, timedelta) else every
        if isinstance(seconds, int | float) and seconds > 0:
            periods[entry["task"].rsplit(".", 1)[-1]] = float(seconds)
    return periods


def sweep_periods(interval: float, names: list[str]) -> dict[str, float]:
    """Seconds between in-process runs of each named sweep: beat's schedule scaled so that its most frequent tasks
    run every `interval` seconds (a sweep with no schedule in seconds runs every interval)."""
    beat = {name: seconds for name, seconds in beat_periods().items() if name in names}
    shortest = min(beat.values(), default=interval)
    return {name: interval * beat[name] / shortest if name in beat else interval for name in names}


def run_sweeps_once(sweeps: dict[str, SweepFunction] | None = None) -> dict[str, int]:
    """Run every sweep once, in order; one failing sweep is logged (-1) and does not stop the others."""
    results: dict[str, int] = {}
    for name, function in (sweeps or registered_sweeps()).items():
        try:
            results[name] = function()
        except Exception:
            logger.exception("periodic sweep %s failed; it runs again next interval", name)
            results[name] = -1
    changed = {name: n for name, n in results.items() if n}
    if changed:
        logger.info("periodic sweep: %s", changed)
    return results


def _run_in_worker_thread(sweeps: dict[str, SweepFunction], due: set[str]) -> dict[str, int]:
    close_old_connections()
    try:
        return run_sweeps_once({name: sweep for name, sweep in sweeps.items() if name in due})
    finally:
        # A pooled worker thread: leave no connection (or SQLite lock) behind between sweeps.
        connections.close_all()


class Sweeper:
    """Runs the sweeps on the running event loop until stopped: each `interval` seconds the sweeps that are due.
    Given `sweeps`, all of them are due every interval; otherwise the beat schedule's tasks at `sweep_periods`."""

    def __init__(self, interval: float | None = None, sweeps: dict[str, SweepFunction] | None = None) -> None:
        self.interval = float(interval if interval is not None else settings.SWEEP_INTERVAL_SECONDS)
        self.sweeps = sweeps
        self.runs = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> "Sweeper":
        """Start on the current running loop. Calling it again while running does nothing."""
        if self.running:
            return self
        self._stopping = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="reviewhub-sweeper")
        return self

    async def _loop(self) -> None:
        assert self._stopping is not None
        logger.info("in-process sweeper started (every %.1f s)", self.interval)
        loop = asyncio.get_running_loop()
        sweeps = self.sweeps if self.sweeps is not None else registered_sweeps()
        if self.sweeps is not None:
            periods = dict.fromkeys(sweeps, self.interval)
        else:
            periods = sweep_periods(self.interval, list(sweeps))
        next_due = dict.fromkeys(sweeps, loop.time())
        while not self._stopping.is_set():
            began = loop.time()
            # A little early counts as due: a period that is a whole number of intervals keeps to it.
            due = {name for name, at in next_due.items() if at <= began + self.interval / 10}
            # thread_sensitive=False: a sweep must not queue behind (or block) requests' sync work.
            await sync_to_async(_run_in_worker_thread, thread_sensitive=False)(sweeps, due)
            for name in due:
                next_due[name] = began + periods[name]
            self.runs += 1
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=self.interval)
            except TimeoutError:
                continue
        logger.info("in-process sweeper stopped")

    async def stop(self) -> None:
        """Finish the sweep in progress, if any, and stop. Safe to call when not running."""
        if self._task is None:
            return
        if self._stopping is not None:
            self._stopping.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=self.interval + 30)
        except TimeoutError:
            self._task.cancel()
        finally:
            self._task = None


_process_sweeper: Sweeper | None = None


def enabled() -> bool:
    return bool(settings.PERIODIC_SWEEPS_IN_PROCESS)


def ensure_started() -> Sweeper | None:
    """Start this process's sweeper on the running loop, once. None when in-process sweeps are off."""
    global _process_sweeper
    if not enabled():
        return None
    loop = asyncio.get_running_loop()
    if _process_sweeper is not None and _process_sweeper.running:
        task = _process_sweeper._task
        if task is not None and task.get_loop() is loop:
            return _process_sweeper
    _process_sweeper = Sweeper().start()
    return _process_sweeper


async def stop_process_sweeper() -> None:
    global _process_sweeper
    if _process_sweeper is not None:
        await _process_sweeper.stop()
        _process_sweeper = None


def with_periodic_sweeps(app: ASGIApp) -> ASGIApp:
    """Wrap the ASGI app: the first event starts the sweeper; lifespan events are answered here."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        ensure_started()
        await app(scope, receive, send)

    return application


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            ensure_started()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await stop_process_sweeper()
            await send({"type": "lifespan.shutdown.complete"})
            return
