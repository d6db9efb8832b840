"""Kubernetes ``NodeSelectorRequirement`` matching of one label value (pure), shared by the scheduler, the
launch filter, drift and the fake cloud provider.

Kubernetes ``k8s.io/apimachinery/pkg/labels/selector.go`` semantics (``In``, ``NotIn``, ``Exists``,
``DoesNotExist``, ``Gt``, ``Lt``) plus Karpenter's inclusive ``Gte``/``Lte`` (core ``pkg/scheduling/requirement.go``
``withinBounds``); bounds compare integers as Go's ``strconv.Atoi`` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")


def parse_int(value: str) -> int | None:
    """``value`` as Go's ``strconv.Atoi`` reads it (optional sign, decimal digits only), else None."""
    return int(value) if _INTEGER.fullmatch(value) else None


def value_matches(operator: str, values: Sequence[str], value: str | None) -> bool:
    """Whether a node's label ``value`` (None: the node lacks the label) satisfies ``key operator values``.

    An absent label satisfies only ``NotIn`` and ``DoesNotExist``; a bound (``Gt``/``Lt``/``Gte``/``Lte``, its
    first value) that is not an integer, or a label value that is not, never matches; an unknown operator never
    matches.
    """
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or not values:
        return False
    bound, number = parse_int(values[0]), parse_int(value)
    if bound is None or number is None:
        return False
    if operator == "Gt":
        return number > bound
    if operator == "Lt":
        return number < bound
    if operator == "Gte":
        return number >= bound
    if operator == "Lte":
        return number <= bound
    return False
