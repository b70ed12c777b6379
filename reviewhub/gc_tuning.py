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

GC_THRESHOLDS (Python's 700,10,10 by default) is the collector's own knob. Raising its last value makes full
collections rarer (700,10,1000 ran none in a bench run with 5,000 sockets), but whatever only a full collection
reclaims (reference cycles, such as the database wrappers of finished request threads) then lingers longer, so it
stays an operator's choice, measured per deployment, not the default. Raising the first value made every young
collection walk the sockets' objects not yet promoted (0.2 s and 1 s pauses, measured).
"""

import gc
import sys

from django.conf import settings


def tune_for_latency() -> None:
    gc.collect()  # what loading left behind, before the rest is frozen
    gc.freeze()
    gc.set_threshold(*settings.GC_THRESHOLDS)
    sys.setswitchinterval(settings.GIL_SWITCH_INTERVAL_MICROSECONDS / 1_000_000)
