"""The cyclic garbage collector's settings for a serving process (``sbemu serve``).

Under load the server allocates a few container objects per message (records, locks,
deliveries, completions) that live until the message is settled, so CPython's default
thresholds (700, 10, 10) run a young collection every few messages and a full one, which walks
every object the process holds (the modules, the configuration, the in-flight window), every
few hundred: under callgrind that was 13% of the receive path's instructions. Once the server
has started, what it holds for good is frozen (never examined again: gc.freeze) and the young
generation is let grow larger before a collection. Reference counting still frees almost
everything at once; the collector only finds cycles, a little later.
"""

from __future__ import annotations

import gc

# Allocations (less deallocations) before a young collection, then young collections before
# a middle one, middle before a full one: see tune_for_serving.
THRESHOLDS = (10_000, 10, 10)


def tune_for_serving() -> None:
    """Freeze what start-up built and raise the young generation's threshold (call it once
    the server has started: a process-wide setting, so the serving command's, not the
    Server's, which tests run inside their own process)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
