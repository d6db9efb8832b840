"""The cyclic garbage collector paused while a solve runs, and while ``karpy simulate`` builds and plans its inputs.

A solve allocates many short-lived objects and frees them by reference count, so collections during it only
rescan the caller's heap (a sixth of a 4,000-claim solve).

Reading 20,000 pods allocates some 3 million container objects (dicts, lists) that all stay alive until the
plan is printed. CPython's cyclic collector runs every 700 net allocations and, every so often, walks every
tracked object of the older generations: on that input it took about a third of the non-solve time, and found
nothing, because manifests are trees (JSON has no cycles) and the scheduling model is frozen attrs values.
Reference counting still frees everything that is dropped, so pausing the collector only delays freeing
*cyclic* garbage until it is resumed (the engine makes little: peak RSS at 20,000 pods moved by under 1 %).

On leaving the outermost pause the collector is resumed, after moving the objects allocated meanwhile straight
to the oldest generation (:func:`gc.freeze` then :func:`gc.unfreeze`, two list splices): left in the youngest
one, the next few collections would each walk them all (0.8 s of CPU at 20,000 pods) to promote them step by
step. They stay collectable; the oldest generation is collected only when it has grown by a quarter (CPython's
rule). Nested pauses (``collect`` called inside a paused caller) are no-ops.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_depth = 0


@contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (reference counting is unaffected); see the module docstring."""
    global _depth
    was_enabled = gc.isenabled()
    _depth += 1
    gc.disable()
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and was_enabled:
            gc.freeze()  # everything tracked → the permanent generation ...
            gc.unfreeze()  # ... → the oldest one: promoted without a walk
            gc.enable()


def pausing_gc(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` run under :func:`paused`."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused():
            return func(*args, **kwargs)

    return wrapper
