"""#6 Channel layer: RedisChannelLayer against RedisPubSubChannelLayer, one-member groups at 500 msg/s.

A receiver process (standing in for the ASGI server: one channel per consumer, each the only member of its
group) and a sender (this process, standing in for the views' `group_send`) share the Redis. Each message
carries its send time on CLOCK_MONOTONIC; the receiver records arrival. Dropped = sent - received after a
drain period. The better layer (no drops first, then the lower p99) should be the default.
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
BACKENDS = {
    "RedisChannelLayer": "channels_redis.core.RedisChannelLayer",
    "RedisPubSubChannelLayer": "channels_redis.pubsub.RedisPubSubChannelLayer",
}


def make_layer(backend: str, redis_url: str, prefix: str) -> Any:
    from django.utils.module_loading import import_string

    return import_string(backend)(hosts=[redis_url], prefix=prefix)


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    seconds = 3.0 if ctx.quick else 10.0
    redis_url = bench_env()["REDIS_URL"]
    results: dict[str, dict[str, Any]] = {}
    for label, backend in BACKENDS.items():
        ctx.progress.start(f"{label}: {RATE:.0f} msg/s for {seconds:.0f} s", int(RATE * seconds))
        results[label] = measure(backend, redis_url, seconds)
    for label, r in results.items():
        report.add(
            Figure(f"{label}: p99 send → handler", r["p99_ms"], "ms", "lower wins", None),
            Figure(f"{label}: dropped of {r['sent']:,}", r["dropped"], "", "0", r["dropped"] == 0),
        )
    better = min(results, key=lambda k: (results[k]["dropped"], results[k]["p99_ms"]))
    other = next(k for k in results if k != better)
    report.add(
        Figure(
            f"default layer: {better}",
            results[better]["p99_ms"],
            "ms p99",
            "the better one is the default",
            None,
            results[other]["p99_ms"],
            other,
            results[better]["p99_ms"] / results[other]["p99_ms"],
        )
    )
    report.details = {**results, "better": better}
    report.notes.append(
        f"{GROUPS} one-member groups, {RATE:.0f} msg/s round-robin over them for {seconds:.0f} s from one sender; "
        "receiver in its own process with one receive loop per channel, as a consumer has."
    )
    return report


def measure(backend: str, redis_url: str, seconds: float) -> dict[str, Any]:
    spawn = multiprocessing.get_context("spawn")
    ready, results = spawn.Queue(), spawn.Queue()
    prefix = f"rhbench-layer-{int(time.time())}"
    count = int(RATE * seconds)
    receiver = spawn.Process(target=receive_process, args=(backend, redis_url, prefix, count, ready, results))
    receiver.start()
    try:
        groups = ready.get(timeout=60)
        sent, errors = asyncio.run(send(backend, redis_url, prefix, groups, count))
        latencies, received = results.get(timeout=seconds + 60)
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
    backend: str, redis_url: str, prefix: str, groups: list[str], count: int
) -> tuple[int, list[str]]:
    """Send `count` messages at RATE/s; a send that raises is a dropped message (the app's pushes are best effort)."""
    layer = make_layer(backend, redis_url, prefix)
    errors: list[str] = []

    async def one(index: int) -> None:
        try:
            await layer.group_send(
                groups[index % len(groups)], {"type": "bench.message", "sent": time.monotonic()}
            )
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:200])

    sent = await paced(count, RATE, one, max_seconds=count / RATE + 5)
    return sent, errors


def receive_process(backend: str, redis_url: str, prefix: str, count: int, ready: Any, results: Any) -> None:
    import os

    os.environ.update({k: v for k, v in bench_env().items() if k == "DJANGO_SETTINGS_MODULE"})
    latencies: list[float] = []

    async def main() -> None:
        layer = make_layer(backend, redis_url, prefix)
        groups = [f"bench.g{i}" for i in range(GROUPS)]
        channels = []
        for group in groups:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            channels.append(channel)
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
        for group, channel in zip(groups, channels, strict=True):
            await layer.group_discard(group, channel)

    asyncio.run(main())
    results.put((latencies, len(latencies)))
