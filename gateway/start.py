"""The ``hermes-gateway`` console script's first module: start-up without the cyclic GC.

A command imports ~600 modules before it does anything, ~200,000 objects that live as
long as the process. The cyclic garbage collector walked them over and over as they came:
~150 collections, one of them full, 60-75 ms of a ~550 ms ``run --task`` here. So the
console script turns it off before anything is imported (this module and
``gateway/__init__`` import nothing else), and the command turns it back on when its
start-up is done (:func:`settled`), after freezing what start-up made: those objects stay
out of every later collection's walk. ``run`` settles once its runtime is built, keeping
what start-up left as cyclic garbage (~1 MB, for one task); the other commands settle
when their settings are loaded, collecting it first (``serve`` then again once its app
has started), so a long-running process holds no more than it did.
"""

from __future__ import annotations

import gc
from typing import NoReturn

_state = {"paused": False}  # whether script() turned the collector off


def script() -> NoReturn:
    """The console script: ``gateway.cli.script`` with the collector off until
    :func:`settled`."""
    if gc.isenabled():
        gc.disable()
        _state["paused"] = True
    from .cli import script as run

    run()


#: Allocations between two young-generation collections in a serving gateway (Python's
#: default: 700). Under load it keeps thousands of young objects alive (200 conversations'
#: requests, tasks, buffers), which each of the default's collections walked and promoted:
#: ~350 collections and ~260 ms of the ~3.2 s of CPU that 1000 answers took here; at
#: 10 000, ~15 and ~50 ms (CPU per answer 2.69 -> 2.35 ms, ``bench/gateway_load.py``).
#: Cyclic garbage waits for up to that many allocations (peak RSS: ``bench/gateway_rss.py``).
SERVING_THRESHOLD = 10_000


def settled(*, collect: bool = False, serving: bool = False) -> None:
    """Start-up is done. With ``collect``: its garbage collected and what is left frozen,
    in any process; with ``serving``, young objects collected every
    :data:`SERVING_THRESHOLD` allocations from now on. Then, if :func:`script` turned the
    collector off: what exists frozen and the collector back on. (A process of the tests'
    own making, calling ``main``, keeps its collector as it was.)"""
    paused, _state["paused"] = _state["paused"], False
    if collect:
        gc.collect()
    if collect or paused:
        gc.freeze()
    if serving:
        gc.set_threshold(SERVING_THRESHOLD, *gc.get_threshold()[1:])
    if paused:
        gc.enable()
