"""Reading prometheus-client's default registry in unit tests: one sample, a sum over a label subset, and the
deltas of several series across a block (the registry is process-wide, so tests compare before and after)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from prometheus_client import REGISTRY


def sample(name: str, /, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` (None when the series does not exist)."""
    return REGISTRY.get_sample_value(name, labels)


def series(name: str) -> list[tuple[dict[str, str], float]]:
    """The labels and value of every sample named ``name``, in registry order."""
    return [(dict(s.labels), s.value) for family in REGISTRY.collect() for s in family.samples if s.name == name]


def since(*series: tuple[str, Mapping[str, str]]) -> Callable[[], list[float]]:
    """``moved = since((name, labels), ...)``: ``moved()`` = how much each exact series has moved since the call,
    at any point (a series that does not exist counts as 0); :func:`Delta` for a whole block."""
    before = [REGISTRY.get_sample_value(n, dict(ls)) or 0.0 for n, ls in series]
    return lambda: [
        (REGISTRY.get_sample_value(n, dict(ls)) or 0.0) - b for (n, ls), b in zip(series, before, strict=True)
    ]


def total(name: str, **labels: str) -> float:
    """The sum of every sample ``name`` whose labels include ``labels``."""
    return sum(
        s.value
        for family in REGISTRY.collect()
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


@contextmanager
def Delta(*series: tuple[str, Mapping[str, str]]) -> Iterator[Callable[[], list[float]]]:
    """``with Delta((name, labels), ...) as delta:`` … ``delta()`` = how much each exact series moved in the
    block (a series that does not exist counts as 0)."""
    before = [REGISTRY.get_sample_value(n, dict(ls)) or 0.0 for n, ls in series]
    after: list[float] = []
    yield lambda: [a - b for a, b in zip(after, before, strict=True)]
    after.extend(REGISTRY.get_sample_value(n, dict(ls)) or 0.0 for n, ls in series)
