"""The in-process periodic sweep of the embedded deployment: deadlines, leases, notification digests and every
other task of the beat schedule (flow purging, webhook retries).

In the services deployment Celery beat runs these (settings.CELERY_BEAT_SCHEDULE). The embedded default has no
beat, so every ASGI process runs the same tasks itself, all every SWEEP_INTERVAL_SECONDS, when
`PERIODIC_SWEEPS_IN_PROCESS` is on.

Why an asyncio task, started by the ASGI app on its first event:
- daphne (`make run`) implements no ASGI lifespan, so there is no startup hook; uvicorn does send lifespan
  startup, and `with_periodic_sweeps` answers it (Channels' router would reject it) and starts the sweep there.
  Under daphne the first connection of any kind starts it: a page, an API call, a socket, or `/healthz`.
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


def _run_in_worker_thread(sweeps: dict[str, SweepFunction] | None) -> dict[str, int]:
    close_old_connections()
    try:
        return run_sweeps_once(sweeps)
    finally:
        # A pooled worker thread: leave no connection (or SQLite lock) behind between sweeps.
        connections.close_all()


class Sweeper:
    """Runs the sweeps every `interval` seconds on the running event loop until stopped."""

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
        while not self._stopping.is_set():
            # thread_sensitive=False: a sweep must not queue behind (or block) requests' sync work.
            await sync_to_async(_run_in_worker_thread, thread_sensitive=False)(self.sweeps)
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
