"""Kubernetes resource quantities (``"500m"``, ``"1.5Gi"``, ``"2e3"``) as integers in canonical units.

Canonical units, used everywhere in karpy: ``cpu`` in millicores, ``memory`` and ``ephemeral-storage`` in
bytes, every other resource (``pods``, ``nvidia.com/gpu``, …) as a plain count. Integers keep the
bin-packing arithmetic exact and fast.

The grammar is Kubernetes' ``resource.Quantity`` (k8s.io/apimachinery ``pkg/api/resource/quantity.go``):
a signed decimal number, optionally with an exponent (``e3``/``E3``), a decimal SI suffix
(``n u m k M G T P E``) or a binary suffix (``Ki Mi Gi Ti Pi Ei``). kubernetes-asyncio 36 ships no parser
(only the synchronous ``kubernetes`` client does), so this small one lives here; values are rounded up,
as the apiserver rounds a quantity up to its canonical scale.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")

MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity into an exact ``Decimal`` in base units (cores, bytes, counts).

    Raises:
        QuantityError: the value does not follow the ``resource.Quantity`` grammar.
    """
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = value.strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"invalid quantity {value!r}")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as err:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"invalid quantity {value!r}") from err
    if exponent:
        return base * (Decimal(10) ** int(exponent[1:]))
    return base * _SUFFIXES[suffix or ""]


def to_canonical(resource: str, value: str | int | float) -> int:
    """A quantity of ``resource`` in karpy's canonical integer unit (millicores for cpu), rounded up.

    Raises:
        QuantityError: the value is not a quantity.
    """
    amount = parse_quantity(value)
    if resource in MILLI_RESOURCES:
        amount *= 1000
    return math.ceil(amount)


def format_canonical(resource: str, amount: int) -> str:
    """The Kubernetes string for a canonical amount: ``"1500m"`` for cpu, ``"1536Mi"`` or bytes for memory."""
    if resource in MILLI_RESOURCES:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


def parse_resource_list(values: dict[str, str | int | float] | None) -> dict[str, int]:
    """A Kubernetes ResourceList (``{"cpu": "1", "memory": "1Gi"}``) in canonical units.

    Raises:
        QuantityError: a value is not a quantity.
    """
    return {name: to_canonical(name, value) for name, value in (values or {}).items()}


def format_resource_list(values: dict[str, int]) -> dict[str, str]:
    """Canonical amounts back to a Kubernetes ResourceList."""
    return {name: format_canonical(name, amount) for name, amount in sorted(values.items())}
