"""Arithmetic on resource maps in canonical units (see :mod:`karpy.apis.quantity`).

A resource map is a plain ``dict[str, int]``: cpu in millicores, memory and ephemeral-storage in bytes,
everything else a count. Missing keys mean zero. Plain dicts keep the scheduling hot path free of model
objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Resources = dict[str, int]


def add(*maps: Mapping[str, int]) -> Resources:
    """The sum of resource maps."""
    total: Resources = {}
    for m in maps:
        for k, v in m.items():
            total[k] = total.get(k, 0) + v
    return total


def fits(requests: Mapping[str, int], available: Mapping[str, int]) -> bool:
    """True when every non-zero request is at most what is available (a missing resource is zero)."""
    return all(v <= 0 or v <= available.get(k, 0) for k, v in requests.items())


def max_of(maps: Iterable[Mapping[str, int]]) -> Resources:
    """Per-resource maximum."""
    out: Resources = {}
    for m in maps:
        for k, v in m.items():
            if v > out.get(k, 0):
                out[k] = v
    return out
