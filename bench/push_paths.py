"""`python -m bench.push_paths`: push latency of two paths, interleaved push by push so both see the same load.

  old  one PUBLISH from the committing thread to channels_redis's group channel (what `publish_now` did, before
       pushes went through the layer's public API)
  new  `pushes.send_to_groups`: the committing thread runs the layer's `group_send` on a borrowed loop

REDIS_URL defaults to Redis db 8 (the bench's); N pushes at RATE per second.
The sending process keeps an event loop busy (2 ms CPU slices, like a loaded ASGI server) and view threads
burn 3 ms CPU before each push (like a view). A separate process holds the subscriber, as in production."""

import asyncio
import multiprocessing as mp
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/8")
GROUP = "bench.paths"
N = int(os.environ.get("N", "1000"))
RATE = float(os.environ.get("RATE", "100"))


def burn(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def receiver(ready, out):
    import django

    django.setup()
    from channels.layers import get_channel_layer

    async def main():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(GROUP, channel)
        ready.set()
        got = []
        while len(got) < N:
            try:
                msg = await asyncio.wait_for(layer.receive(channel), 10)
            except TimeoutError:
                break
            got.append((msg["path"], time.monotonic() - msg["t"]))
        out.put(got)

    asyncio.run(main())


def main():
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=receiver, args=(ready, out))
    proc.start()
    import django

    django.setup()
    import redis
    from channels.layers import get_channel_layer
    from django.conf import settings

    from elicitation.delivery import pushes
    from reviewhub.redis_pool import SharedConnectionPool

    layer = get_channel_layer()
    url = settings.REDIS_URL
    client = redis.Redis(connection_pool=SharedConnectionPool.from_url(url))

    def old(message):  # the removed publish_now
        client.publish(f"asgi__group__{GROUP}", layer.serialize(message))

    def new(message):
        pushes.send_to_groups([(GROUP, message)])

    # A busy server loop in this process.
    stop = threading.Event()

    def busy_loop():
        async def spin():
            while not stop.is_set():
                burn(0.002)
                await asyncio.sleep(0)

        asyncio.run(spin())

    threading.Thread(target=busy_loop, daemon=True).start()
    ready.wait(30)
    time.sleep(0.5)
    new({"type": "x", "path": "warm", "t": time.monotonic()})
    old({"type": "x", "path": "warm", "t": time.monotonic()})

    def view(i):
        burn(0.003)
        (old if i % 2 else new)({"type": "x", "path": "old" if i % 2 else "new", "t": time.monotonic()})

    with ThreadPoolExecutor(8) as pool:
        start = time.monotonic()
        for i in range(N - 2):
            delay = start + i / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(view, i)
    got = out.get(timeout=60)
    proc.join()
    stop.set()
    for path in ("old", "new"):
        ms = sorted(d * 1000 for p, d in got if p == path)
        p50, p90, p99 = (ms[min(len(ms) - 1, int(f * len(ms)))] for f in (0.5, 0.9, 0.99))
        print(f"{path}: n={len(ms)} p50={p50:.2f} ms p90={p90:.2f} ms p99={p99:.2f} ms max={ms[-1]:.2f} ms")


if __name__ == "__main__":
    main()
