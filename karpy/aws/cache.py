"""Every cache of the AWS provider: one table of named TTLs, each with the Karpenter value it follows and why,
the ``cachetools`` constructors the providers build their caches with, and the unavailable-offerings (ICE)
cache (Karpenter AWS ``pkg/cache/cache.go`` and ``pkg/cache/unavailableofferings.go``).

Every cache takes a ``timer`` (monotonic seconds; tests inject a fake one) and expires an entry when
``timer() >= inserted + ttl``. What is deliberately *not* cached: subnets, security groups and instance
profiles (Karpenter holds them 1 min / 15 min; karpy re-reads them on every EC2NodeClass status refresh, every
``SUBNET_REFRESH_INTERVAL``, so a failed read is seen as one and the last known status is kept), and
DescribeInstances (Karpenter reads it uncached too before a termination).

Bounded by size, not time (karpy's own): the rendered user data of launches
(:class:`karpy.aws.launchtemplates.LaunchTemplateProvider`), a ``cachetools.LRUCache`` of ``USER_DATA_CACHE``
(1024) renders keyed by the ``stable_hash`` of every render input; the same inputs always give the same text, so
an entry never goes stale.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Any, Final

import attrs
from cachetools import TLRUCache, TTLCache

Timer = Callable[[], float]


@attrs.frozen(slots=True)
class CacheTTL:
    """One named TTL: ``seconds``, the Karpenter source and value it follows, and why it has this value."""

    name: str
    seconds: float
    karpenter: str
    why: str


INSTANCE_TYPE_INFO: Final = CacheTTL(
    "instance type info",
    12 * 3600.0,
    "controllers/providers/instancetype/controller.go: DescribeInstanceTypes and DescribeInstanceTypeOfferings "
    "re-read every 12 h",
    "the EC2 catalogue changes a few times a year and a full read is tens of API pages",
)
RESOLVED_INSTANCE_TYPES: Final = CacheTTL(
    "resolved instance types per EC2NodeClass",
    5 * 60.0,
    "pkg/cache/cache.go InstanceTypesZonesAndOfferingsTTL (5 m), pkg/providers/instancetype/instancetype.go",
    "a provisioning batch costs no AWS call; the key holds every input (zones, AMIs, kubelet, block devices, "
    "ICE marks, price and catalogue versions), so the TTL only bounds memory of a NodeClass seen once",
)
UNAVAILABLE_OFFERINGS: Final = CacheTTL(
    "unavailable offerings (ICE)",
    3 * 60.0,
    "pkg/cache/cache.go UnavailableOfferingsTTL (3 m), pkg/cache/unavailableofferings.go",
    "long enough to stop retrying a dry capacity pool, short enough to come back once capacity returns",
)
PRICES: Final = CacheTTL(
    "on-demand and spot prices",
    12 * 3600.0,
    "controllers/providers/pricing/controller.go: prices refreshed every 12 h",
    "prices change rarely and each refresh is hundreds of API pages",
)
PRICING_API_RETRY: Final = CacheTTL(
    "on-demand prices after a failed Pricing API call",
    3600.0,
    "karpy's own (Karpenter keeps the static table until the next 12 h refresh)",
    "the static table is used meanwhile; retrying hourly recovers from a blip without a scan per batch",
)
SPOT_PRICE_RETRY: Final = CacheTTL(
    "spot prices after a failed DescribeSpotPriceHistory",
    60.0,
    "karpy's own (Karpenter retries on its pricing controller's next run)",
    "the last known spot prices stay in use; a minute spares EC2 a call per batch during an outage",
)
LAUNCH_TEMPLATES: Final = CacheTTL(
    "launch templates ensured",
    60.0,
    "pkg/cache/cache.go DefaultTTL (1 m), pkg/providers/launchtemplate/launchtemplate.go",
    "spares a DescribeLaunchTemplates per launch in a burst, short enough to notice a template deleted behind our back",
)
LAUNCH_TEMPLATE_UNUSED: Final = CacheTTL(
    "launch template unused before garbage collection",
    5 * 60.0,
    "karpy's own (Karpenter deletes a template when it leaves its 1 m cache)",
    "longer than Karpenter's eviction so a burst after a short lull reuses its templates",
)
AMIS: Final = CacheTTL(
    "resolved AMIs (SSM alias parameters and DescribeImages) per selector terms",
    60.0,
    "AMI_REFRESH_INTERVAL (default 1 m, at least 1 m); pkg/providers/amifamily/ami.go caches for DefaultTTL",
    "the default; the operator passes AMI_REFRESH_INTERVAL: a new EKS AMI release is picked up within it",
)

TTLS: Final = (
    INSTANCE_TYPE_INFO,
    RESOLVED_INSTANCE_TYPES,
    UNAVAILABLE_OFFERINGS,
    PRICES,
    PRICING_API_RETRY,
    SPOT_PRICE_RETRY,
    LAUNCH_TEMPLATES,
    LAUNCH_TEMPLATE_UNUSED,
    AMIS,
)
"""The table, in the order above (documentation and tests iterate it)."""


def ttl_cache(ttl: CacheTTL | float, timer: Timer, maxsize: float = math.inf) -> TTLCache[Any, Any]:
    """A ``cachetools.TTLCache`` whose entries live ``ttl`` seconds of ``timer``; unbounded by default (every
    cache here is keyed by a small set: NodeClasses, offerings, template names)."""
    seconds = ttl.seconds if isinstance(ttl, CacheTTL) else float(ttl)
    return TTLCache(maxsize=maxsize, ttl=seconds, timer=timer)


class Deadlines:
    """Keys that stay fresh for a TTL chosen per renewal (a ``cachetools.TLRUCache`` whose values are the TTLs).

    For tables that keep their last value when a refresh fails but retry sooner (prices: 12 h after a good
    read, 1 h or 1 min after a failed one).
    """

    def __init__(self, timer: Timer) -> None:
        self._cache: TLRUCache[Hashable, float] = TLRUCache(
            maxsize=math.inf, ttu=lambda _key, ttl, now: now + ttl, timer=timer
        )

    def fresh(self, key: Hashable) -> bool:
        """True until the TTL given at the last :meth:`renew` of ``key`` has passed."""
        return key in self._cache

    def renew(self, key: Hashable, ttl: CacheTTL | float) -> None:
        """``key`` is fresh for ``ttl`` seconds from now."""
        self._cache[key] = ttl.seconds if isinstance(ttl, CacheTTL) else float(ttl)


class UnavailableOfferings:
    """Offerings that recently failed with an insufficient-capacity error (Karpenter ``UnavailableOfferings``).

    Keyed by (capacity type, instance type, zone); an entry expires after :data:`UNAVAILABLE_OFFERINGS` (3 min).
    ``seq`` changes on every mark, and when a lookup finds marks expired, so dependent caches can key on it.
    """

    def __init__(self, clock: Timer = time.monotonic, ttl: float = UNAVAILABLE_OFFERINGS.seconds) -> None:
        self.clock = clock
        self.ttl = ttl
        self._marks: TTLCache[tuple[str, str, str], bool] = ttl_cache(ttl, clock)
        self.seq = 0

    def mark(self, capacity_type: str, instance_type: str, zone: str) -> None:
        """Make the offering unavailable for ``ttl`` seconds."""
        self._marks[(capacity_type, instance_type, zone)] = True
        self.seq += 1

    def mark_capacity_type(self, capacity_type: str) -> None:
        """Every offering of ``capacity_type`` (e.g. spot without its service-linked role)."""
        self.mark(capacity_type, "*", "*")

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        """True while a mark for this offering (or its whole capacity type) has not expired."""
        if self._marks.expire():
            self.seq += 1
        return (capacity_type, instance_type, zone) in self._marks or (capacity_type, "*", "*") in self._marks
