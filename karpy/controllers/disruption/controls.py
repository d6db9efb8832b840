"""karpy's disruption controls beyond Karpenter: savings threshold, cooldown, drift circuit breaker, pause.

Each is a NodePool annotation (so a platform team flips it with ``kubectl annotate``) with a cluster-wide
default from settings; every default is safe (see the README's "Disruption controls" table):

* ``karpy.sh/consolidation-min-savings-per-hour`` (USD/hour, default ``CONSOLIDATION_MIN_SAVINGS_PER_HOUR``=0)
  and ``karpy.sh/consolidation-min-savings-ratio`` (saving ÷ price of what is removed, default
  ``CONSOLIDATION_MIN_SAVINGS_RATIO``=0.1): an Underutilized move happens only when its saving pays for its
  disruption, so ``m6a.8xlarge`` is never replaced by ``m6a.8xlarge`` for a rounding error (aws#8536).
* ``karpy.sh/disruption-cooldown`` (Go duration, default ``DISRUPTION_COOLDOWN``=5m): a node younger than the
  cooldown, or whose pods belong to a workload karpy disrupted within it, is not consolidated — a steady
  cluster settles instead of flapping (aws#7146, core#1019).
* ``karpy.sh/drift-halted`` (written by karpy): drift and budgeted expiration stop for a NodePool whose
  replacement NodeClaims failed to initialize within ``DISRUPTION_REPLACEMENT_TIMEOUT`` (a bad AMI never takes
  the cluster down, aws#3979). The halt lifts by itself when the NodePool template or the EC2NodeClass
  changes (a fix), or by ``kubectl annotate nodepool <name> karpy.sh/drift-halted-``.
* ``karpy.sh/disruption-paused: "true"`` on a NodePool, or on the Namespace ``DISRUPTION_PAUSE_NAMESPACE``
  (default ``kube-system``) for the whole cluster, or ``DISRUPTION_PAUSED=true``: no voluntary disruption and
  no expiration at all (core#2497). Reading the Namespace failing also pauses (fail closed).
* ``karpy.sh/expiration: Budgeted`` on a NodePool: expired nodes are replaced like drifted ones (replacement
  first, within the ``Drifted`` budget, in waves) instead of Karpenter's forceful deletion (core#1750).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

import attrs

from karpy.apis.nodepool import NodePool

# The threshold's rule lives in the consolidation core, shared with ``karpy simulate --consolidate``.
from karpy.consolidation.search import savings_pay as savings_pay
from karpy.settings import Settings, parse_duration

ANNOTATION_MIN_SAVINGS: Final = "karpy.sh/consolidation-min-savings-per-hour"
ANNOTATION_MIN_SAVINGS_RATIO: Final = "karpy.sh/consolidation-min-savings-ratio"
ANNOTATION_COOLDOWN: Final = "karpy.sh/disruption-cooldown"
ANNOTATION_DRIFT_HALTED: Final = "karpy.sh/drift-halted"
ANNOTATION_PAUSED: Final = "karpy.sh/disruption-paused"
ANNOTATION_EXPIRATION: Final = "karpy.sh/expiration"
ANNOTATION_DECISION: Final = "karpy.sh/disruption-decision"
EXPIRATION_BUDGETED: Final = "Budgeted"


@attrs.frozen(slots=True)
class DisruptionSettings:
    """Cluster-wide disruption knobs (from :class:`karpy.settings.Settings`); seconds and USD/hour.

    Attributes:
        poll: seconds between disruption evaluations (Karpenter: 10 s).
        validation_delay: seconds a consolidation/emptiness command waits before re-validation (Karpenter 15 s).
        replacement_timeout: seconds replacements get to initialize before the command is abandoned.
        min_savings_per_hour / min_savings_ratio / cooldown: defaults for the NodePool annotations above.
        paused: ``DISRUPTION_PAUSED``.
        pause_namespace: the Namespace whose ``karpy.sh/disruption-paused`` annotation pauses the cluster.
        spot_to_spot: feature gate ``SpotToSpotConsolidation``.
        drift_check_interval: seconds between cloud lookups (subnet, security groups) per NodeClaim.
        ca_bundle: the cluster CA bundle the EC2NodeClass hash includes (Karpenter's ``GetCABundle``; None: none).
    """

    poll: float = 10.0
    validation_delay: float = 15.0
    replacement_timeout: float = 600.0
    min_savings_per_hour: float = 0.0
    min_savings_ratio: float = 0.1
    cooldown: float = 300.0
    paused: bool = False
    pause_namespace: str = "kube-system"
    spot_to_spot: bool = False
    drift_check_interval: float = 300.0
    ca_bundle: str | None = None


def from_settings(settings: Settings) -> DisruptionSettings:
    """The disruption knobs from karpy's settings (environment variables, see the README)."""
    return DisruptionSettings(
        poll=settings.disruption_poll_interval,
        validation_delay=settings.disruption_validation_delay,
        replacement_timeout=settings.disruption_replacement_timeout,
        min_savings_per_hour=settings.consolidation_min_savings_per_hour,
        min_savings_ratio=settings.consolidation_min_savings_ratio,
        cooldown=settings.disruption_cooldown,
        paused=settings.disruption_paused,
        pause_namespace=settings.disruption_pause_namespace,
        spot_to_spot=bool(settings.feature_gates.get("SpotToSpotConsolidation", False)),
        drift_check_interval=settings.drift_check_interval,
    )


def _float(value: str | None, default: float) -> float:
    try:
        return float(value) if value not in (None, "") else default
    except ValueError:
        return default


def min_savings(nodepool: NodePool, settings: DisruptionSettings) -> tuple[float, float]:
    """(USD/hour, ratio) a consolidation of this NodePool must save; an invalid annotation keeps the default."""
    notes = nodepool.meta.annotations
    return (
        _float(notes.get(ANNOTATION_MIN_SAVINGS), settings.min_savings_per_hour),
        _float(notes.get(ANNOTATION_MIN_SAVINGS_RATIO), settings.min_savings_ratio),
    )


def cooldown(nodepool: NodePool, settings: DisruptionSettings) -> float:
    """Seconds of the NodePool's cooldown (annotation, else the setting); an invalid value keeps the default."""
    raw = nodepool.meta.annotations.get(ANNOTATION_COOLDOWN)
    if not raw:
        return settings.cooldown
    try:
        return parse_duration(raw)
    except ValueError:
        return settings.cooldown


def paused(annotations: Mapping[str, str]) -> bool:
    """The annotations (of a NodePool, or of the pause Namespace) carry ``karpy.sh/disruption-paused: "true"``."""
    return annotations.get(ANNOTATION_PAUSED, "").lower() == "true"


def expiration_budgeted(nodepool: NodePool) -> bool:
    """``karpy.sh/expiration: Budgeted``: expiration is replaced within the Drifted budget, not forced."""
    return nodepool.meta.annotations.get(ANNOTATION_EXPIRATION) == EXPIRATION_BUDGETED


def halt_record(reason: str, nodepool_hash: str, nodeclass_hash: str, at: str) -> str:
    """The ``karpy.sh/drift-halted`` value: why, when, and the hashes a fix must change."""
    return json.dumps(
        {"reason": reason, "nodepoolHash": nodepool_hash, "nodeclassHash": nodeclass_hash, "at": at},
        sort_keys=True,
    )


def drift_halted(nodepool: NodePool, nodepool_hash: str, nodeclass_hash: str) -> str:
    """Why drift is halted for this NodePool ("" when it is not): the halt holds while both hashes are the
    ones recorded when it tripped; an unreadable record holds (fail closed) until removed."""
    raw = nodepool.meta.annotations.get(ANNOTATION_DRIFT_HALTED)
    if not raw:
        return ""
    try:
        record = json.loads(raw)
    except ValueError:
        return "unreadable halt record"
    if not isinstance(record, dict):
        return "unreadable halt record"
    if record.get("nodepoolHash") != nodepool_hash or record.get("nodeclassHash") != nodeclass_hash:
        return ""
    return str(record.get("reason") or "halted")
