"""In-memory test doubles for the cloud: :class:`FakeCloudProvider`, :class:`FakeInterruptionQueue` and
:class:`FakeLaunchTemplateJanitor`.

Modelled on Karpenter core's ``pkg/cloudprovider/fake/cloudprovider.go``: instance types are given at
construction, ``create`` launches the cheapest available offering the request admits, every call is recorded
for assertions, and errors can be injected per method. Nothing here talks to AWS; unit tests pass these
wherever a :class:`~karpy.cloudprovider.types.CloudProvider` or
:class:`~karpy.cloudprovider.types.InterruptionQueue` is expected.
"""

from __future__ import annotations

import builtins
import itertools
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from karpy.apis import labels as wk
from karpy.apis.selectors import value_matches
from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProviderError,
    IncompatibleInstanceTypes,
    InstanceType,
    InsufficientCapacityError,
    LaunchRequest,
    LaunchResult,
    NodeClaimNotFoundError,
    Offering,
    QueuedMessage,
    RepairPolicy,
)

FAKE_IMAGE_ID = "ami-0fa4e0000000000000"
FAKE_LAUNCH_TIME = datetime(2026, 1, 1, tzinfo=UTC)
FAKE_REPAIR_POLICIES: tuple[RepairPolicy, ...] = (
    # Karpenter core's fake (``pkg/cloudprovider/fake/cloudprovider.go``): one forceful fallback on "BadNode".
    RepairPolicy("BadNode", "False", toleration_seconds=30 * 60, termination_grace_period_seconds=0.0),
)


@attrs.frozen(slots=True)
class Call:
    """One recorded call: the method name and its positional arguments."""

    method: str
    args: tuple[Any, ...]


class _Injected:
    """Errors queued per method name: each call pops the next one (FIFO) and raises it."""

    def __init__(self) -> None:
        self._errors: dict[str, deque[Exception]] = {}

    def add(self, method: str, error: Exception, times: int) -> None:
        self._errors.setdefault(method, deque()).extend([error] * times)

    def raise_next(self, method: str) -> None:
        queue = self._errors.get(method)
        if queue:
            raise queue.popleft()


def _instance_id_of(provider_id: str) -> str:
    """``aws:///<zone>/<id>`` → ``<id>`` (as the AWS provider does: the zone part does not matter)."""
    return provider_id.rsplit("/", 1)[-1]


def _admits(requirements: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy every NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt, and
    Karpenter's inclusive Gte, Lte; bounds compare integers only, as Karpenter's ``withinBounds``)."""
    return all(
        value_matches(
            str(r.get("operator", "In")), [str(v) for v in r.get("values") or ()], labels.get(str(r.get("key", "")))
        )
        for r in requirements
    )


class FakeCloudProvider:
    """A :class:`~karpy.cloudprovider.types.CloudProvider` over an in-memory set of instances.

    Args:
        instance_types: what ``get_instance_types`` returns (for every NodeClass).
        incompatible: what ``incompatible_instance_types`` returns.
        cluster_name: the ``kubernetes.io/cluster/<name>=owned`` tag put on launched instances.
        region: the ``topology.kubernetes.io/region`` label of launches.
        clock: launch time of created instances (timezone-aware UTC); a fixed instant by default.

    Behaviour:
        * ``create`` is idempotent by NodeClaim name (a live instance tagged with it is adopted). Otherwise it
          launches the cheapest offering of ``request.instance_types`` that is available, not marked
          unavailable, and admitted by ``request.requirements`` (matched against the type's labels plus zone,
          zone-id and capacity type); none → :class:`InsufficientCapacityError`. Instance ids are
          deterministic: ``i-00000000000000001``, ``i-00000000000000002``, … and the providerID is
          ``aws:///<zone>/<id>``.
        * ``delete`` terminates at once (no ``shutting-down`` phase); ``get`` and ``delete`` of a terminated or
          unknown instance raise :class:`NodeClaimNotFoundError`.
        * ``mark_unavailable`` records the offering; ``get_instance_types`` then reports it ``available=False``
          and ``create`` skips it (no 3-minute expiry: :meth:`clear_unavailable` ends it).
        * ``fail(method, error, times)`` makes the next ``times`` calls of ``method`` raise ``error``;
          ``allowed_create_calls`` (Karpenter: ``AllowedCreateCalls``) makes creates beyond it raise
          :class:`InsufficientCapacityError`; ``create_errors_for_nodepool`` (Karpenter:
          ``ErrorsForNodePool``) raises the mapped error for launches of that NodePool.
        * Every call is appended to ``calls``; ``create_calls``/``delete_calls``/``get_calls`` filter it.
    """

    def __init__(
        self,
        instance_types: Iterable[InstanceType] = (),
        *,
        incompatible: IncompatibleInstanceTypes | None = None,
        cluster_name: str = "unit",
        region: str = "us-east-1",
        clock: Callable[[], datetime] = lambda: FAKE_LAUNCH_TIME,
    ) -> None:
        self.instance_types: list[InstanceType] = list(instance_types)
        self.incompatible = incompatible or IncompatibleInstanceTypes()
        self.cluster_name = cluster_name
        self.region = region
        self.clock = clock
        self.instances: dict[str, CloudInstance] = {}
        """Live instances by instance id."""
        self.unlisted: set[str] = set()
        """Instance ids ``get`` finds but ``list`` misses (EC2's eventual consistency)."""
        self.terminated: dict[str, CloudInstance] = {}
        self.unavailable: set[tuple[str, str, str]] = set()
        """Offerings marked unavailable: (instance type, zone, capacity type)."""
        self.marked: list[tuple[str, str, str]] = []
        """Every ``mark_unavailable`` call, in order."""
        self.marked_reservations: list[str] = []
        self.calls: list[Call] = []
        self.allowed_create_calls: int | None = None
        self.placement_groups: dict[str, str | None] = {}
        """EC2NodeClass name → the placement group id its selector resolves to (None: cannot be read)."""
        self.create_errors_for_nodepool: dict[str, Exception] = {}
        self.repair_policy: list[RepairPolicy] = list(FAKE_REPAIR_POLICIES)
        """What ``repair_policies`` returns (Karpenter's fake ``RepairPolicy``)."""
        self._errors = _Injected()
        self._ids = itertools.count(1)

    # --- test controls -----------------------------------------------------------------------------------

    def fail(self, method: str, error: Exception, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` (``create``, ``delete``, ``get``, ``list``, ``create_tags``,
        ``get_instance_types``, ``incompatible_instance_types``) raise ``error``."""
        self._errors.add(method, error, times)

    def add_instance(self, instance: CloudInstance, *, listed: bool = True) -> CloudInstance:
        """Put an instance in the cloud as if launched earlier; ``listed=False`` hides it from ``list`` only."""
        self.instances[instance.instance_id] = instance
        if not listed:
            self.unlisted.add(instance.instance_id)
        return instance

    def clear_unavailable(self) -> None:
        """Forget every ``mark_unavailable`` (as the ICE cache's expiry would)."""
        self.unavailable.clear()

    @property
    def create_calls(self) -> builtins.list[LaunchRequest]:
        """The requests ``create`` received, in order (including failed ones)."""
        return [c.args[0] for c in self.calls if c.method == "create"]

    @property
    def delete_calls(self) -> builtins.list[str]:
        """The providerIDs ``delete`` received, in order."""
        return [c.args[0] for c in self.calls if c.method == "delete"]

    @property
    def create_tags_calls(self) -> builtins.list[tuple[str, dict[str, str]]]:
        """The (providerID, tags) pairs ``create_tags`` received, in order."""
        return [(c.args[0], c.args[1]) for c in self.calls if c.method == "create_tags"]

    @property
    def get_calls(self) -> builtins.list[str]:
        """The providerIDs ``get`` received, in order."""
        return [c.args[0] for c in self.calls if c.method == "get"]

    def _record(self, method: str, *args: Any) -> None:
        self.calls.append(Call(method, args))
        self._errors.raise_next(method)

    # --- CloudProvider -----------------------------------------------------------------------------------

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> builtins.list[InstanceType]:
        """The configured instance types, offerings marked unavailable reported ``available=False``."""
        self._record("get_instance_types", nodeclass)
        return [self._with_unavailable(it) for it in self.instance_types]

    async def incompatible_instance_types(self, nodeclass: Mapping[str, Any]) -> IncompatibleInstanceTypes:
        """The configured ``incompatible`` value."""
        self._record("incompatible_instance_types", nodeclass)
        return self.incompatible

    async def create(self, request: LaunchRequest) -> LaunchResult:
        """Launch (or adopt) one instance for ``request``; see the class docstring for the choice.

        Raises:
            InsufficientCapacityError: no admitted offering is available, or ``allowed_create_calls`` is spent.
            Exception: an error injected with :meth:`fail` or ``create_errors_for_nodepool``.
        """
        self._record("create", request)
        if request.nodepool_name in self.create_errors_for_nodepool:
            raise self.create_errors_for_nodepool[request.nodepool_name]
        if self.allowed_create_calls is not None and len(self.create_calls) > self.allowed_create_calls:
            raise InsufficientCapacityError("erroring as number of AllowedCreateCalls has been exceeded")
        for existing in self.instances.values():
            if existing.tags.get(wk.TAG_NODECLAIM) == request.nodeclaim_name:
                return self._result(self._type_of(request, existing), existing)
        chosen = self._cheapest(request)
        if chosen is None:
            raise InsufficientCapacityError(f"no available offering for NodeClaim {request.nodeclaim_name}")
        it, offering = chosen
        instance_id = f"i-{next(self._ids):017x}"
        instance = CloudInstance(
            instance_id=instance_id,
            provider_id=f"aws:///{offering.zone}/{instance_id}",
            instance_type=it.name,
            zone=offering.zone,
            capacity_type=offering.capacity_type,
            state="running",
            image_id=FAKE_IMAGE_ID,
            launch_time=self.clock(),
            tags={
                wk.cluster_tag(self.cluster_name): "owned",
                wk.TAG_EKS_CLUSTER_NAME: self.cluster_name,
                wk.TAG_NODEPOOL: request.nodepool_name,
                wk.TAG_NODECLAIM: request.nodeclaim_name,
                wk.TAG_NODECLASS: str((request.nodeclass.get("metadata") or {}).get("name", "")),
            },
        )
        self.instances[instance_id] = instance
        return self._result(it, instance)

    async def delete(self, provider_id: str) -> None:
        """Terminate at once.

        Raises:
            NodeClaimNotFoundError: the instance is terminated or unknown.
        """
        self._record("delete", provider_id)
        instance = self.instances.pop(_instance_id_of(provider_id), None)
        if instance is None:
            raise NodeClaimNotFoundError(f"instance {_instance_id_of(provider_id)} not found")
        self.unlisted.discard(instance.instance_id)
        self.terminated[instance.instance_id] = attrs.evolve(instance, state="terminated")

    async def get(self, provider_id: str) -> CloudInstance:
        """The live instance behind ``provider_id``.

        Raises:
            NodeClaimNotFoundError: it is terminated or unknown.
        """
        self._record("get", provider_id)
        instance = self.instances.get(_instance_id_of(provider_id))
        if instance is None:
            raise NodeClaimNotFoundError(f"instance {_instance_id_of(provider_id)} not found")
        return instance

    async def create_tags(self, provider_id: str, tags: Mapping[str, str]) -> None:
        """Merge ``tags`` into the live instance's tags (recorded as ``create_tags`` calls).

        Raises:
            NodeClaimNotFoundError: it is terminated or unknown.
        """
        self._record("create_tags", provider_id, dict(tags))
        instance_id = _instance_id_of(provider_id)
        instance = self.instances.get(instance_id)
        if instance is None:
            raise NodeClaimNotFoundError(f"instance {instance_id} not found")
        self.instances[instance_id] = attrs.evolve(instance, tags={**instance.tags, **tags})

    async def list(self) -> builtins.list[CloudInstance]:
        """Every live instance except the ``unlisted`` ones, in launch order."""
        self._record("list")
        return [i for i in self.instances.values() if i.instance_id not in self.unlisted]

    async def placement_group_drift(self, nodeclass: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
        """``PlacementGroupDrift`` when ``labels``' placement-group-id is not ``placement_groups[<nodeclass
        name>]`` ("" for an unknown name); None when that entry is None (cannot be judged)."""
        name = str((nodeclass.get("metadata") or {}).get("name", ""))
        group = self.placement_groups.get(name, "")
        if group is None:
            return None
        return "PlacementGroupDrift" if labels.get("karpenter.k8s.aws/placement-group-id", "") != group else ""

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str, reservation_id: str = "") -> None:
        """Record the offering as unavailable (no expiry; see :meth:`clear_unavailable`); ``reservation_id`` is
        recorded in :attr:`marked_reservations`."""
        if reservation_id:
            self.marked_reservations.append(reservation_id)
        self.calls.append(Call("mark_unavailable", (instance_type, zone, capacity_type)))
        self.marked.append((instance_type, zone, capacity_type))
        self.unavailable.add((instance_type, zone, capacity_type))

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """``repair_policy`` (set it to test other policies)."""
        return tuple(self.repair_policy)

    # --- helpers -----------------------------------------------------------------------------------------

    def _with_unavailable(self, it: InstanceType) -> InstanceType:
        if not any((it.name, o.zone, o.capacity_type) in self.unavailable for o in it.offerings):
            return it
        offerings = tuple(
            attrs.evolve(o, available=False) if (it.name, o.zone, o.capacity_type) in self.unavailable else o
            for o in it.offerings
        )
        return attrs.evolve(it, offerings=offerings)

    def _cheapest(self, request: LaunchRequest) -> tuple[InstanceType, Offering] | None:
        candidates = [
            (o.price, it, o)
            for it in request.instance_types
            for o in self._with_unavailable(it).offerings
            if o.available and _admits(request.requirements, _offering_labels(it, o))
        ]
        if not candidates:
            return None
        _, it, offering = min(candidates, key=lambda c: c[0])
        return it, offering

    def _type_of(self, request: LaunchRequest, instance: CloudInstance) -> InstanceType:
        """An adopted instance's type: from the request, else the catalogue (its AMIs may no longer admit it)."""
        catalogue = [*request.instance_types, *self.instance_types, *self.incompatible.instance_types]
        it = next((t for t in catalogue if t.name == instance.instance_type), None)
        if it is None:
            raise CloudProviderError(f"instance type {instance.instance_type} of {instance.instance_id} is unknown")
        return it

    def _result(self, it: InstanceType, instance: CloudInstance) -> LaunchResult:
        """As the AWS provider reports a launch: the type's labels plus zone, region, zone-id, capacity type."""
        labels = {
            **it.labels,
            wk.LABEL_ZONE: instance.zone,
            wk.LABEL_REGION: self.region,
            wk.LABEL_CAPACITY_TYPE: instance.capacity_type,
        }
        zone_id = next((o.zone_id for o in it.offerings if o.zone == instance.zone and o.zone_id), "")
        if zone_id:
            labels[wk.LABEL_ZONE_ID] = zone_id
        return LaunchResult(
            provider_id=instance.provider_id,
            instance_id=instance.instance_id,
            instance_type=it.name,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            image_id=instance.image_id,
            capacity=dict(it.capacity),
            allocatable=it.allocatable,
            labels=labels,
        )


def _offering_labels(it: InstanceType, offering: Offering) -> dict[str, str]:
    labels = {
        **it.labels,
        wk.LABEL_INSTANCE_TYPE: it.name,
        wk.LABEL_ZONE: offering.zone,
        wk.LABEL_CAPACITY_TYPE: offering.capacity_type,
    }
    if offering.zone_id:
        labels[wk.LABEL_ZONE_ID] = offering.zone_id
    return labels


class FakeInterruptionQueue:
    """An :class:`~karpy.cloudprovider.types.InterruptionQueue` in memory, with SQS's at-least-once delivery.

    ``send`` enqueues; ``receive`` hands out up to 10 messages at once (never waits: an empty queue answers
    ``[]``) and keeps them in flight until ``delete``d; :meth:`redeliver` puts undeleted in-flight messages back,
    as the visibility timeout would. ``deleted`` lists deleted receipt handles in order; ``fail(method, error)``
    injects errors into ``receive`` or ``delete``.
    """

    def __init__(self, messages: Iterable[QueuedMessage] = ()) -> None:
        self.pending: deque[QueuedMessage] = deque(messages)
        self.in_flight: dict[str, QueuedMessage] = {}
        self.deleted: list[str] = []
        self.receives = 0
        self._errors = _Injected()

    def send(self, *messages: QueuedMessage) -> None:
        """Enqueue messages for the next ``receive``."""
        self.pending.extend(messages)

    def fail(self, method: str, error: Exception, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``receive`` or ``delete`` raise ``error``."""
        self._errors.add(method, error, times)

    def redeliver(self) -> None:
        """Return every in-flight (received, not deleted) message to the queue."""
        self.pending.extend(self.in_flight.values())
        self.in_flight.clear()

    async def receive(self) -> list[QueuedMessage]:
        """Up to 10 pending messages (possibly none), now in flight."""
        self.receives += 1
        self._errors.raise_next("receive")
        batch = [self.pending.popleft() for _ in range(min(10, len(self.pending)))]
        self.in_flight.update((m.receipt_handle, m) for m in batch)
        return batch

    async def delete(self, receipt_handle: str) -> None:
        """Delete a message by receipt handle (an unknown handle is accepted, as SQS does)."""
        self._errors.raise_next("delete")
        self.in_flight.pop(receipt_handle, None)
        self.deleted.append(receipt_handle)


class FakeLaunchTemplateJanitor:
    """A :class:`~karpy.controllers.garbagecollection.LaunchTemplateJanitor`: ``templates`` maps a launch
    template name to its EC2NodeClass; ``delete_unused_launch_templates`` deletes those whose NodeClass is gone
    and records each call's NodeClass names in ``calls``."""

    def __init__(self, templates: Mapping[str, str] | None = None) -> None:
        self.templates: dict[str, str] = dict(templates or {})
        self.calls: list[frozenset[str]] = []

    async def delete_unused_launch_templates(self, nodeclasses: Collection[str]) -> tuple[str, ...]:
        """Delete the templates of NodeClasses not in ``nodeclasses``; their names, sorted."""
        self.calls.append(frozenset(nodeclasses))
        gone = tuple(sorted(name for name, nc in self.templates.items() if nc not in nodeclasses))
        for name in gone:
            del self.templates[name]
        return gone
