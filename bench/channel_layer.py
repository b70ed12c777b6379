"""#6 Channel layer: RedisChannelLayer against RedisPubSubChannelLayer, in the two shapes ReviewHub uses a layer.

- Per consumer: one-member groups at 500 msg/s, one channel per consumer (a reviewer page, an agent socket).
- The waiter hub: ONE channel per process, member of the agent shards' groups, that carries every push for the
  process's long-polls (delivery/waiters.py), sent a burst of 1,000 at once (a sweep or a bulk answer closing many
  requests in one moment).

A receiver process (standing in for the ASGI server) and a sender (this process, standing in for the views'
`group_send`) share the Redis. Each message carries its send time on CLOCK_MONOTONIC; the receiver records arrival.
Dropped = sent - received after a drain period. The better layer (fewest drops over both shapes first, then the
lower p99) should be the default; the last row says whether the configured default is that one.
"""

import asyncio
import multiprocessing
import time
from typing import Any

from bench.harness import Context, Figure, Report, bench_env, paced, summary_ms

NAME = "layer"
TITLE = "Channel layer: Redis vs Redis pub/sub"
RATE = 500.0
GROUPS = 100
HUB_GROUPS = 64  # pushes.AGENT_SHARDS: the groups a process's hub channel joins
BURST = 1000
BACKENDS = {
    "RedisChannelLayer": "channels_redis.core.RedisChannelLayer",
    "RedisPubSubChannelLayer": "channels_redis.pubsub.RedisPubSubChannelLayer",
}


def make_layer(backend: str, redis_url: str, prefix: str) -> Any:
    from django.utils.module_loading import import_string

    return import_string(backend)(hosts=[redis_url], prefix=prefix)


def run(ctx: Context) -> Report:
    from django.conf import settings

    report = Report(NAME, TITLE)
    seconds = 3.0 if ctx.quick else 10.0
    redis_url = bench_env()["REDIS_URL"]
    results: dict[str, dict[str, Any]] = {}
    bursts: dict[str, dict[str, Any]] = {}
    for label, backend in BACKENDS.items():
        ctx.progress.start(f"{label}: {RATE:.0f} msg/s for {seconds:.0f} s", int(RATE * seconds))
        results[label] = measure(backend, redis_url, int(RATE * seconds), hub=False)
        bursts[label] = measure(backend, redis_url, BURST, hub=True)
    configured = next(
        (k for k, path in BACKENDS.items() if path == settings.CHANNEL_LAYERS["default"]["BACKEND"]), "?"
    )
    for label in BACKENDS:
        r, b = results[label], bursts[label]
        # Drops are a miss for the layer ReviewHub runs; the other's are what the choice below weighs.
        shipped = label == configured
        target = "0" if shipped else "reported (not the default)"
        report.add(
            Figure(f"{label}: p99 send → handler", r["p99_ms"], "ms", "lower wins", None),
            Figure(
                f"{label}: dropped of {r['sent']:,}",
                r["dropped"],
                "",
                target,
                r["dropped"] == 0 if shipped else None,
            ),
            Figure(
                f"{label}: hub channel, burst of {b['sent']:,}: dropped",
                b["dropped"],
                "",
                target,
                b["dropped"] == 0 if shipped else None,
            ),
        )
    better = min(BACKENDS, key=lambda k: (results[k]["dropped"] + bursts[k]["dropped"], results[k]["p99_ms"]))
    other = next(k for k in BACKENDS if k != configured) if configured in BACKENDS else better
    report.add(
        Figure(
            f"configured default: {configured}",
            results[configured]["p99_ms"] if configured in results else float("nan"),
            "ms p99",
            "the better one (fewest drops, then p99) is the default",
            configured == better,
            results[other]["p99_ms"],
            other,
            results[configured]["p99_ms"] / results[other]["p99_ms"] if configured in results else None,
        )
    )
    report.details = {**results, "burst": bursts, "better": better, "configured": configured}
    report.notes.append(
        f"{GROUPS} one-member groups, {RATE:.0f} msg/s round-robin over them for {seconds:.0f} s from one sender; "
        "receiver in its own process with one receive loop per channel, as a consumer has. Then the hub's shape: "
        f"one channel in {HUB_GROUPS} groups, {BURST:,} sends started at once, one receive loop."
    )
    return report


def measure(backend: str, redis_url: str, count: int, *, hub: bool) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    ready, results = spawn.Queue(), spawn.Queue()
    prefix = f"rhbench-layer-{int(time.time() * 1000)}"
    receiver = spawn.Process(
        target=receive_process, args=(backend, redis_url, prefix, count, hub, ready, results)
    )
    receiver.start()
    try:
        groups = ready.get(timeout=60)
        sent, errors = asyncio.run(send(backend, redis_url, prefix, groups, count, burst=hub))
        latencies, received = results.get(timeout=count / RATE + 60)
    finally:
        receiver.join(10)
        if receiver.is_alive():
            receiver.terminate()
    return {
        **summary_ms(latencies),
        "sent": sent,
        "received": received,
        "dropped": max(0, sent - received),
        "send_errors": len(errors),
        "send_error_samples": sorted(set(errors))[:3],
    }


async def send(
    backend: str, redis_url: str, prefix: str, groups: list[str], count: int, *, burst: bool
) -> tuple[int, list[str]]:
    """Send `count` messages at RATE/s, or all at once (`burst`); a send that raises is a dropped message (the app's
    pushes are best effort)."""
    layer = make_layer(backend, redis_url, prefix)
    errors: list[str] = []

    async def one(index: int) -> None:
        try:
            await layer.group_send(
                groups[index % len(groups)], {"type": "bench.message", "sent": time.monotonic()}
            )
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:200])

    if burst:
        await asyncio.gather(*(one(index) for index in range(count)))
        return count, errors
    sent = await paced(count, RATE, one, max_seconds=count / RATE + 5)
    return sent, errors


def receive_process(
    backend: str, redis_url: str, prefix: str, count: int, hub: bool, ready: Any, results: Any
) -> None:
    import os

    os.environ.update({k: v for k, v in bench_env().items() if k == "DJANGO_SETTINGS_MODULE"})
    latencies: list[float] = []

    async def main() -> None:
        layer = make_layer(backend, redis_url, prefix)
        groups = [f"bench.g{i}" for i in range(HUB_GROUPS if hub else GROUPS)]
        channels: list[str] = []
        memberships: list[tuple[str, str]] = []
        for group in groups:
            if not hub or not channels:
                channels.append(await layer.new_channel())
            await layer.group_add(group, channels[-1])
            memberships.append((group, channels[-1]))
        ready.put(groups)
        last = time.monotonic()
        give_up = time.monotonic() + count / RATE + 30

        async def loop(channel: str) -> None:
            nonlocal last
            while True:
                message = await layer.receive(channel)
                now = time.monotonic()
                latencies.append(now - message["sent"])
                last = now

        tasks = [asyncio.ensure_future(loop(c)) for c in channels]
        # Done when everything arrived, or nothing arrived for 3 s after the first message.
        while (
            len(latencies) < count
            and time.monotonic() < give_up
            and (not latencies or time.monotonic() - last < 3)
        ):
            await asyncio.sleep(0.2)
        for task in tasks:
            task.cancel()
        for group, channel in memberships:
            await layer.group_discard(group, channel)

    asyncio.run(main())
    results.put((latencies, len(latencies)))
