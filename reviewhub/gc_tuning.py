"""The garbage collector of a server process, tuned for latency.

CPython's full (generation 2) collection walks every tracked object while holding the GIL. A web process holds
~340,000 of them once Django and its libraries are loaded, and each open agent socket adds ~190 more, so a full
collection stopped the event loop for 0.2 s in an answering process and for 1.3 s in one holding 5,000 sockets
(measured with a gc callback, bench #3). Under load a full collection ran every ~5 s: each middle-generation
collection promotes whatever requests are in flight at that moment, and a full one follows once a quarter of the
old generation is new. Every push and long-poll caught behind one waited for it.

So, when the process starts serving, everything loaded so far (modules, settings, URL patterns, the app) is
frozen: the collector never walks it again. None of it becomes garbage, and frozen objects are still freed by
reference counting. An answering process's full collection then walks ~25,000 objects instead of ~360,000.

GC_THRESHOLDS is the collector's own knob, 700,10,1000 here against Python's 700,10,10. What is loaded at start is
frozen, but what a process holds later is not: 5,000 open agent sockets are ~1 million tracked objects, and a full
collection of them held the loop 0.5-0.9 s. At Python's default one ran every 7-20 s under the push bench's load,
and a single one in the measured window made the WebSocket p99 850 ms (bench #3). With the last value at 1,000 a
full collection waits for 1,000 middle-generation ones (and, as always, for a quarter of the old generation to be
new); the push runs saw none in the window. The price is that garbage only a full collection reclaims (reference
cycles that outlived two young collections) lingers longer: the answering process ended a push run at 200 MiB
against 185 MiB at the default, the sockets process at 393 MiB either way. Raising the first value instead made
every young collection walk the sockets' objects not yet promoted (0.2 s and 1 s pauses, measured).
"""

import gc

from django.conf import settings


def tune_for_latency() -> None:
    gc.collect()  # what loading left behind, before the rest is frozen
    gc.freeze()
    gc.set_threshold(*settings.GC_THRESHOLDS)
