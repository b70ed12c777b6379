"""Settings for servers under benchmark: the production settings plus bench-only URLs and isolation.

Nothing here makes the code under test faster than in production; it only keeps the bench out of other
people's way (its own Redis key/channel prefix, no in-process sweeps touching its rows mid-measurement).
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rh_bench")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/8")

from reviewhub.settings import *  # noqa: F403
from reviewhub.settings import CHANNEL_LAYERS, DEBUG

ROOT_URLCONF = "bench.urls"
# Redis pub/sub channels are shared by every database number: a prefix keeps bench pushes from reaching
# (or receiving) another engineer's test run on the same Redis.
CHANNEL_LAYERS["default"].setdefault("CONFIG", {})["prefix"] = "rhbench"
# Sweeps would expire or release benchmark rows while they are being measured; Celery beat is off too.
PERIODIC_SWEEPS_IN_PROCESS = False
# Request logs would cost the servers CPU the benchmark is measuring.
LOGGING["root"]["level"] = "WARNING"  # type: ignore[name-defined]  # noqa: F405
assert not DEBUG, "benchmarks need DEBUG off: DEBUG keeps every SQL query in memory"
