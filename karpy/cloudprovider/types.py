"""The contract between karpy's controllers and a cloud (Karpenter: ``cloudprovider.CloudProvider``).

Controllers never talk to AWS directly: they call a :class:`CloudProvider`. Its obligations:

* ``get_instance_types`` returns every instance type a NodeClass can launch (types no machine image of the
  NodeClass can boot are left out, and reported by ``incompatible_instance_types``), with allocatable-relevant
  capacity and overhead and one :class:`Offering` per (zone, capacity type); unavailable offerings (ICE
  cache, unknown price) are returned with ``available=False`` rather than dropped, so the scheduler can
  explain why a pod did not fit.
* ``create`` launches exactly one instance for a NodeClaim or raises a typed error; it never leaves an
  instance behind when it raises, and the instance carries tags that map it back to the NodeClaim so a
  restart can find it (``list``) instead of launching again.
* ``delete`` terminates and raises :class:`NodeClaimNotFoundError` once the instance is gone (so the
  terminator knows it may release its finalizer).

All resource amounts are canonical integers (:mod:`karpy.apis.quantity`); prices are USD per hour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import attrs


class CloudProviderError(Exception):
    """Base class of the cloud provider's typed errors."""


class InsufficientCapacityError(CloudProviderError):
    """No offering could be launched (EC2 ICE codes, or nothing left after the launch-time filters).

    Karpenter deletes the NodeClaim and re-plans on the next batch without the failed offerings.
    """


class NodeClaimNotFoundError(CloudProviderError):
    """The instance behind a providerID no longer exists (terminated or never launched)."""


class NodeClassNotReadyError(CloudProviderError):
    """The NodeClaim's EC2NodeClass is missing or not Ready (subnets, security groups or AMIs unresolved)."""


@attrs.frozen(slots=True)
class Offering:
    """Where and how an instance type can be bought: one zone, one capacity type, one price.

    ``price`` is USD per hour. ``available`` is False when the offering is ICE-cached, has no known
    price, or its zone is outside the NodeClass subnets (Karpenter: ``Offering.Available``).

    A ``reserved`` offering (capacity type ``reserved``, :mod:`karpy.aws.capacityreservations`) names its
    capacity reservation (``reservation_id`` ``cr-…``, ``reservation_type`` ``default``/``capacity-block``,
    ``reservation_interruptible``) and the instances it can still take (``reservation_capacity``); it is
    ``available`` only while that is above zero (Karpenter's ``Offering.Launchable``). Other offerings leave them
    empty.
    """

    zone: str
    capacity_type: str
    price: float
    available: bool = True
    zone_id: str = ""
    price_overlaid: bool = False
    """``price`` comes from a NodeOverlay (Karpenter ``Offering.IsPriceOverlaid``)."""
    reservation_id: str = ""
    reservation_type: str = ""
    reservation_interruptible: bool = False
    reservation_capacity: int = 0


@attrs.frozen(slots=True)
class InstanceType:
    """An instance type as the scheduler sees it.

    Attributes:
        name: EC2 instance type name, e.g. ``m5.large``.
        labels: the single-valued well-known labels of this type (``node.kubernetes.io/instance-type``,
            ``kubernetes.io/arch``, ``kubernetes.io/os``, ``karpenter.k8s.aws/instance-*``). Zone and
            capacity type are not here: they come from ``offerings``.
        capacity: canonical resources of the node (cpu millicores = vCPUs*1000, memory bytes after the
            VM overhead, pods, ephemeral-storage bytes, extended resources such as ``nvidia.com/gpu``).
        overhead: kube-reserved + system-reserved + eviction threshold, canonical units.
        offerings: one per (zone, capacity type).
    """

    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, int]
    overhead: Mapping[str, int]
    offerings: tuple[Offering, ...]
    capacity_overlaid: bool = False
    """``capacity`` includes a NodeOverlay's resources (Karpenter ``InstanceType.IsCapacityOverlayApplied``)."""

    @property
    def allocatable(self) -> dict[str, int]:
        """Capacity minus overhead, floored at zero (Karpenter: ``InstanceType.Allocatable``)."""
        return {k: max(0, v - self.overhead.get(k, 0)) for k, v in self.capacity.items()}

    def cheapest_available_price(self) -> float | None:
        """Lowest price among available offerings, USD/hour; None when nothing is available."""
        prices = [o.price for o in self.offerings if o.available]
        return min(prices) if prices else None


@attrs.frozen(slots=True)
class IncompatibleInstanceTypes:
    """Instance types a NodeClass leaves out of ``get_instance_types`` because none of its AMIs can boot them.

    ``reason`` names what the NodeClass's AMIs require (Karpenter wording: the EC2NodeClass resolves AMIs only
    for these requirements), e.g. ``EC2NodeClass "default" resolves AMIs only for (kubernetes.io/arch In
    [amd64], karpenter.k8s.aws/instance-gpu-count DoesNotExist)``; "" when nothing is left out.
    """

    instance_types: tuple[InstanceType, ...] = ()
    reason: str = ""


@attrs.frozen(slots=True)
class LaunchRequest:
    """What the NodeClaim lifecycle asks the cloud to launch.

    Attributes:
        nodeclaim_name: ``metadata.name`` of the NodeClaim (tagged on the instance as
            ``karpenter.sh/nodeclaim`` so a restart can adopt an instance instead of launching again).
        nodepool_name: the owning NodePool (tag ``karpenter.sh/nodepool``).
        nodeclass: the EC2NodeClass object as JSON (``metadata``, ``spec``, ``status``), status resolved.
        requirements: NodeClaim ``spec.requirements`` as JSON (``key``, ``operator``, ``values``,
            ``minValues``); narrow the instance types, zones and capacity types that may be launched.
        instance_types: the candidate types, cheapest first (already filtered by the scheduler).
        labels: labels the Node must register with (passed to kubelet ``--node-labels``).
        taints: NodeClaim ``spec.taints`` + ``spec.startupTaints`` as JSON; the launch adds
            ``karpenter.sh/unregistered:NoExecute`` (kubelet ``--register-with-taints``).
        kubelet: the EC2NodeClass ``spec.kubelet`` block (maxPods, kubeReserved, …), may be empty.
    """

    nodeclaim_name: str
    nodepool_name: str
    nodeclass: Mapping[str, Any]
    requirements: Sequence[Mapping[str, Any]]
    instance_types: Sequence[InstanceType]
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]
    kubelet: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class LaunchResult:
    """What was launched: written to the NodeClaim status and labels (Karpenter: ``instanceToNodeClaim``).

    ``provider_id`` is ``aws:///<zone>/<instance-id>``; ``capacity``/``allocatable`` are canonical;
    ``labels`` are the instance type's labels plus zone, zone-id and capacity type.
    """

    provider_id: str
    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    image_id: str
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    labels: Mapping[str, str]


@attrs.frozen(slots=True)
class CloudInstance:
    """An instance the cloud reports as owned by this cluster (for restart adoption and garbage collection).

    ``tags`` are the EC2 tags; ``state`` the EC2 state name (pending, running, shutting-down, …);
    ``launch_time`` is timezone-aware UTC. ``capacity_reservation_*``: the capacity reservation a ``reserved``
    instance runs in (id, ``default``/``capacity-block``, interruptible); empty for other capacity types.
    """

    instance_id: str
    provider_id: str
    instance_type: str
    zone: str
    capacity_type: str
    state: str
    image_id: str
    launch_time: datetime
    tags: Mapping[str, str]
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()
    capacity_reservation_id: str = ""
    capacity_reservation_type: str = ""
    capacity_reservation_interruptible: bool = False


class RepairAction(StrEnum):
    """What a repair policy asks for (Karpenter core ``pkg/cloudprovider/types.go`` ``RepairAction``)."""

    REBOOT_NODE = "RebootNode"
    """Reboot the instance in place (AWS ``RebootForRepair`` gate; karpy rejects that gate, so never selected)."""
    REPLACE_NODE = "ReplaceNode"
    """Delete the NodeClaim; the provisioner launches capacity for its pods."""


@attrs.frozen(slots=True)
class RepairPolicy:
    """When a Node condition makes its node unhealthy enough to repair (Karpenter core ``pkg/cloudprovider/types.go``
    ``RepairPolicy``; used by :mod:`karpy.controllers.node_repair`).

    Attributes:
        condition_type / condition_status: the Node condition (``Ready``, ``NetworkingReady``, ...) and the unhealthy
            status (``False``, ``Unknown``).
        reason_regex: a regular expression searched in the condition's ``reason`` (Go ``regexp.MatchString``:
            unanchored); "" is the policy set's default fallback (Karpenter v1.15 requires exactly one).
        toleration_seconds: added to the condition's ``lastTransitionTime`` to get when the policy becomes eligible.
        termination_grace_period_seconds: the drain bound repair applies (None: inherit the NodeClaim's
            ``terminationGracePeriod``; 0: forceful, no drain).
        priority: 0-100, higher repairs first (Karpenter orders candidates by it; karpy's keyed repair uses it to
            pick the condition a node is repaired for).
        action: :class:`RepairAction`.
    """

    condition_type: str
    condition_status: str
    toleration_seconds: float
    reason_regex: str = ""
    termination_grace_period_seconds: float | None = None
    priority: int = 0
    action: RepairAction = RepairAction.REPLACE_NODE


class CloudProvider(Protocol):
    """What karpy needs from a cloud; AWS implements it in :mod:`karpy.aws.cloudprovider`."""

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> list[InstanceType]:
        """Instance types launchable under ``nodeclass`` (EC2NodeClass JSON with resolved status).

        Raises:
            NodeClassNotReadyError: the NodeClass status has no subnets.
        """
        ...

    async def incompatible_instance_types(self, nodeclass: Mapping[str, Any]) -> IncompatibleInstanceTypes:
        """The instance types ``get_instance_types`` leaves out for want of a compatible machine image, and why
        (the provisioner names it on pods only such types would fit).

        Raises:
            NodeClassNotReadyError: the NodeClass status has no subnets.
        """
        ...

    async def create(self, request: LaunchRequest) -> LaunchResult:
        """Launch one instance for a NodeClaim; idempotent by NodeClaim name (adopts a tagged instance).

        Raises:
            InsufficientCapacityError: no offering could be launched; nothing was left running.
            NodeClassNotReadyError: the NodeClass cannot be used yet.
            CloudProviderError: any other failure (retried by the caller with backoff).
        """
        ...

    async def delete(self, provider_id: str) -> None:
        """Terminate the instance behind ``provider_id`` unless it is already shutting down.

        Raises:
            NodeClaimNotFoundError: the instance is terminated or unknown (termination is complete).
        """
        ...

    async def get(self, provider_id: str) -> CloudInstance:
        """The instance behind ``provider_id``.

        Raises:
            NodeClaimNotFoundError: it is terminated or unknown.
        """
        ...

    async def create_tags(self, provider_id: str, tags: Mapping[str, str]) -> None:
        """Add (or overwrite) ``tags`` on the instance behind ``provider_id``; other tags are kept. ``get``
        reads the current tags, uncached (Karpenter AWS ``instance.CreateTags``, used by the NodeClaim tagging
        controller).

        Raises:
            NodeClaimNotFoundError: it is terminated or unknown.
            CloudProviderError: any other failure (retried by the caller with backoff).
        """
        ...

    async def list(self) -> list[CloudInstance]:
        """Every non-terminated instance carrying this cluster's karpy ownership tags."""
        ...

    async def placement_group_drift(self, nodeclass: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
        """A NodeClaim's placement-group drift reason, judged from its ``labels`` and its NodeClass (JSON): ""
        when none, None when it cannot be judged now (Karpenter AWS ``isPlacementGroupDrifted``:
        ``PlacementGroupDrift`` when the NodeClaim's placement-group-id label is not the group the NodeClass's
        selector resolves to)."""
        ...

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str, reservation_id: str = "") -> None:
        """Keep the offering (``instance_type`` in ``zone`` as ``capacity_type``) out of launches for 3 minutes;
        a ``reserved`` offering is scoped to its ``reservation_id`` (other reservations stay offered).

        Karpenter AWS: a spot interruption warning (and a capacity-reservation interruption warning) marks its
        offering unavailable in the ICE cache so the replacement goes elsewhere (``interruption/utils.go``
        ``markUnavailableOfferings``, ``UnavailableOfferings.MarkUnavailable``).
        """
        ...

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """The complete static set of Node conditions this cloud considers unhealthy, and when to repair them
        (Karpenter ``CloudProvider.RepairPolicies``); read by node repair (``NodeRepair`` gate)."""
        ...


class InterruptionKind(StrEnum):
    """What an interruption message is about (Karpenter AWS ``pkg/controllers/interruption/messages``); the value
    is Karpenter's ``message_type`` metric label."""

    SPOT_INTERRUPTED = "spot_interrupted"
    REBALANCE_RECOMMENDATION = "rebalance_recommendation"
    SCHEDULED_CHANGE = "scheduled_change"
    INSTANCE_STOPPED = "instance_stopped"
    INSTANCE_TERMINATED = "instance_terminated"
    CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
    NO_OP = "no_op"
    """A well-formed event karpy does not act on (unknown source/detail-type/version, filtered-out state)."""
    INVALID = "invalid"
    """Not a message at all (not JSON, not an EventBridge envelope, a known shape missing its fields)."""


@attrs.frozen(slots=True)
class InterruptionMessage:
    """One interruption event, parsed.

    Attributes:
        kind: what the event is about; ``NO_OP`` for well-formed events karpy does not act on (unknown
            source/detail-type/version, filtered-out states or services), ``INVALID`` for bodies that cannot be
            parsed.
        instance_ids: the EC2 instance ids the event is about (``i-…``), in message order, de-duplicated.
        time: the envelope ``time`` (timezone-aware UTC), None when absent or unparsable; used for the
            queue-latency metric only.
        detail_type: the EventBridge ``detail-type`` ("" when absent).
        event_id: the envelope ``id`` ("" when absent), for logs.
        state: the EC2 state of an instance state-change notification, lower-cased ("" otherwise).
        reason: for ``no_op``/``invalid``, why (for the log line).
    """

    kind: InterruptionKind
    instance_ids: tuple[str, ...] = ()
    time: datetime | None = None
    detail_type: str = ""
    event_id: str = ""
    state: str = ""
    reason: str = ""


@attrs.frozen(slots=True)
class QueuedMessage:
    """A message received from the interruption queue: the parsed event and the handle to delete it with."""

    message_id: str
    receipt_handle: str
    message: InterruptionMessage


class InterruptionQueue(Protocol):
    """Where interruption events arrive (AWS: an SQS queue fed by EventBridge rules, :mod:`karpy.aws.sqs`)."""

    async def receive(self) -> list[QueuedMessage]:
        """Long-poll for up to 10 messages (may return none after the poll's wait time).

        Raises:
            CloudProviderError: the queue could not be read (the caller backs off and retries).
        """
        ...

    async def delete(self, receipt_handle: str) -> None:
        """Delete a handled message so it is not delivered again.

        Raises:
            CloudProviderError: the message could not be deleted (it will be redelivered).
        """
        ...
