"""The garbage collector of a server process, tuned for latency.

CPython's full (generation 2) collection walks every tracked object while holding the GIL. A web process holds
~340,000 of them once Django and its libraries are loaded, and each open agent socket adds ~190 more, so a full
collection stopped the event loop for 0.2 s in an answering process and for 1.3 s in one holding 5,000 sockets
(measured with a gc callback, bench #3). With Python's thresholds (700, 10, 10) busy processes ran one every ~5 s:
each middle-generation collection promotes whatever requests are in flight at that moment, and a full one follows
once a quarter of the old generation is new. Every push and long-poll caught behind one waited for it.

So, when the process starts serving:
- everything loaded so far (modules, settings, URL patterns, the app) is frozen: the collector never walks it
  again. None of it becomes garbage, and frozen objects are still freed by reference counting.
- a full collection is considered only after GC_THRESHOLDS[2] middle-generation collections (1,000, not 10);
  CPython's quarter-new rule still applies. Young collections keep their small default size: raising it to 50,000
  made each of them walk the sockets' objects not yet promoted (0.2 s and 1 s pauses, measured).
Cyclic garbage that reached the old generation waits longer to be reclaimed; bench #4's RSS per socket says what
it costs.
"""

import gc

from django.conf import settings


def tune_for_latency() -> None:
    gc.collect()  # what loading left behind, before the rest is frozen
    gc.freeze()
    gc.set_threshold(*settings.GC_THRESHOLDS)
