"""The AWS cloud provider: karpy's :class:`~karpy.cloudprovider.types.CloudProvider` on EC2, a facade over one
provider per AWS noun (Karpenter AWS ``pkg/cloudprovider/cloudprovider.go``).

``create`` is idempotent by NodeClaim name: it first adopts a live instance tagged
``karpenter.sh/nodeclaim=<name>`` for this cluster (a restart between launch and the NodeClaim status write
must not launch twice); otherwise it refuses a NodeClass whose status is not resolved, launches through
:class:`~karpy.aws.instances.InstanceProvider` with Karpenter's tags, reads the instance back and turns it into
a :class:`~karpy.cloudprovider.types.LaunchResult` (Karpenter ``instanceToNodeClaim``). Anything failing after
an instance exists terminates it.

The providers: :mod:`karpy.aws.instancetypes` (catalogue), :mod:`karpy.aws.pricing`, :mod:`karpy.aws.instances`
(CreateFleet, Describe/TerminateInstances), :mod:`karpy.aws.launchtemplates`, :mod:`karpy.aws.nodeclass`
(subnets, security groups, AMIs, instance profile), :mod:`karpy.aws.capacityreservations` (capacity
reservations: status, reserved offerings, targeted launches), with their caches in :mod:`karpy.aws.cache`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.aws import capacityreservations as cr
from karpy.aws import nodeclass as nodeclass_resolution
from karpy.aws.amis import AMIProvider, no_ami_reason
from karpy.aws.cache import AMIS, Timer, UnavailableOfferings
from karpy.aws.instances import InstanceProvider, parse_provider_id
from karpy.aws.instancetypes import InstanceTypeProvider
from karpy.aws.launchtemplates import LaunchTemplateProvider, unused_templates
from karpy.aws.networkinterfaces import efa_only_count, interfaces_fit
from karpy.aws.nodeclass import NodeClassResolution
from karpy.aws.placementgroups import (
    STRATEGY_PARTITION,
    PlacementGroup,
    PlacementGroupProvider,
    instance_partition,
    launch_placement,
    nodeclaim_labels,
    placement_group_drift,
    required_partition,
    selector_of,
    supports_strategy,
)
from karpy.aws.pricing import PricingProvider
from karpy.aws.repairpolicies import LEGACY_REPAIR_POLICIES, REPAIR_POLICIES
from karpy.aws.session import AWSClients
from karpy.aws.userdata import DEFAULT_CLUSTER_DNS, DEFAULT_SERVICE_CIDR
from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProviderError,
    IncompatibleInstanceTypes,
    InstanceType,
    LaunchRequest,
    LaunchResult,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
    RepairPolicy,
)
from karpy.runtime.fence import NotLeader

log = structlog.get_logger("karpy.aws.cloudprovider")
RESTRICTED_TAG_PREFIXES: Final = ("kubernetes.io/cluster/",)
RESTRICTED_TAGS: Final = frozenset({wk.TAG_EKS_CLUSTER_NAME, wk.TAG_NODEPOOL, wk.TAG_NODECLAIM, wk.TAG_NODECLASS})


class AWSCloudProvider:
    """EC2 behind the CloudProvider protocol, plus ``resolve_nodeclass`` for the EC2NodeClass status controller.

    Args:
        clients: open aiobotocore clients.
        cluster_name: ``CLUSTER_NAME``; tags ``kubernetes.io/cluster/<name>=owned`` and ``eks:eks-cluster-name``.
        cluster_endpoint / cluster_ca_bundle: written into the nodeadm NodeConfig.
        region: the EC2 region (``topology.kubernetes.io/region``).
        k8s_version: ``major.minor``; selects the EKS AMI alias SSM path.
        vm_memory_overhead_percent / reserved_enis / isolated_vpc: Karpenter's settings of the same names.
        cluster_cidr / cluster_dns: the service CIDR and DNS IPs for the NodeConfig.
        ami_refresh_interval: ``AMI_REFRESH_INTERVAL`` seconds, how long resolved AMIs are cached.
        legacy_repair_policies: ``LEGACY_NODE_REPAIR``: serve the legacy node repair policies (Karpenter's
            ``WithLegacyRepairPolicies``; :mod:`karpy.aws.repairpolicies`).
        reserved_capacity: the ``ReservedCapacity`` feature gate (capacity reservations,
            :mod:`karpy.aws.capacityreservations`).
        clock: monotonic seconds, for the caches (tests inject one).
    """

    def __init__(
        self,
        clients: AWSClients,
        *,
        cluster_name: str,
        cluster_endpoint: str,
        cluster_ca_bundle: str,
        region: str,
        k8s_version: str,
        vm_memory_overhead_percent: float = 0.075,
        reserved_enis: int = 0,
        isolated_vpc: bool = False,
        cluster_cidr: str = DEFAULT_SERVICE_CIDR,
        cluster_dns: Sequence[str] = DEFAULT_CLUSTER_DNS,
        ami_refresh_interval: float = AMIS.seconds,
        legacy_repair_policies: bool = False,
        clock: Timer = time.monotonic,
        reserved_capacity: bool = True,
    ) -> None:
        self.legacy_repair_policies = legacy_repair_policies
        self.clients = clients
        self.cluster_name = cluster_name
        self.cluster_endpoint = cluster_endpoint
        self.cluster_ca_bundle = cluster_ca_bundle
        self.region = region
        self.k8s_version = k8s_version
        self.unavailable = UnavailableOfferings(clock)
        self.reserved_capacity = reserved_capacity
        self.capacity_reservations = cr.CapacityReservationProvider(clients.ec2, timer=clock)
        self.pricing = PricingProvider(clients.ec2, clients.pricing, region, isolated_vpc=isolated_vpc, clock=clock)
        self.instance_types = InstanceTypeProvider(
            clients.ec2,
            self.pricing,
            region=region,
            vm_memory_overhead_percent=vm_memory_overhead_percent,
            reserved_enis=reserved_enis,
            unavailable=self.unavailable,
            clock=clock,
        )
        self.launch_templates = LaunchTemplateProvider(
            clients.ec2,
            cluster_name,
            clock,
            cluster_endpoint=cluster_endpoint,
            cluster_ca_bundle=cluster_ca_bundle,
            cluster_cidr=cluster_cidr,
            cluster_dns=cluster_dns,
            reserved_capacity=reserved_capacity,
        )
        self.instances = InstanceProvider(
            clients.ec2,
            cluster_name,
            unavailable=self.unavailable,
            launch_templates=self.launch_templates,
            reservations=self.capacity_reservations if reserved_capacity else None,
        )
        self.amis = AMIProvider(clients.ec2, clients.ssm, k8s_version, ttl=ami_refresh_interval, clock=clock)
        self.placement_groups = PlacementGroupProvider(clients.ec2, clock)

    # NodeClass --------------------------------------------------------------------------------------------

    async def resolve_nodeclass(self, nodeclass: Mapping[str, Any]) -> NodeClassResolution:
        """Resolved ``status`` and conditions of an EC2NodeClass (see :mod:`karpy.aws.nodeclass`)."""
        return await nodeclass_resolution.resolve(
            self.clients.ec2,
            self.clients.ssm,
            self.clients.iam,
            nodeclass,
            cluster_name=self.cluster_name,
            region=self.region,
            k8s_version=self.k8s_version,
            amis=self.amis,
            placement_groups=self.placement_groups,
            capacity_reservations=self.capacity_reservations if self.reserved_capacity else None,
        )

    # Catalogue --------------------------------------------------------------------------------------------

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> list[InstanceType]:
        """Instance types launchable under ``nodeclass`` (see :mod:`karpy.aws.instancetypes`).

        Raises:
            NodeClassNotReadyError: the NodeClass status has no subnets.
            CloudProviderError: EC2 could not be read.
        """
        try:
            types = await self._network_compatible(nodeclass, await self.instance_types.list(nodeclass))
            entries = (nodeclass.get("status") or {}).get("capacityReservations") or []
            if not self.reserved_capacity or not entries:
                return types
            return cr.with_reserved_offerings(
                types,
                entries,
                on_demand=await self.pricing.on_demand_prices(),
                free=self.capacity_reservations.available,
                ice=self.unavailable.is_unavailable,
            )
        except NodeClassNotReadyError:
            raise
        except Exception as err:
            raise CloudProviderError(f"listing instance types: {err}") from err

    async def _network_compatible(self, nodeclass: Mapping[str, Any], types: list[InstanceType]) -> list[InstanceType]:
        """``types`` without those that cannot hold ``spec.networkInterfaces`` or join the placement group's
        strategy (Karpenter ``compatibility.go``), each advertising ``vpc.amazonaws.com/efa`` = the number of
        ``efa-only`` interfaces when there are any (Karpenter ``efas``) and labelled with the placement group's
        id (Karpenter puts it in every offering's requirements, so pods and NodePools may select it). A new list:
        the cached one stays as is."""
        spec = nodeclass.get("spec") or {}
        group = (await self.placement_groups.lookup(nodeclass)).group
        if group is None and not spec.get("networkInterfaces"):
            return types
        infos = {str(i["InstanceType"]): i for i in await self.instance_types.infos()}
        efas = efa_only_count(spec)
        labels = {wk.LABEL_PLACEMENT_GROUP_ID: group.id} if group is not None else {}
        out = []
        for it in types:
            info = infos.get(it.name) or {}
            if not (interfaces_fit(info, spec) and supports_strategy(info, group)):
                continue
            capacity = {**it.capacity, wk.RESOURCE_EFA: efas} if efas else it.capacity
            out.append(attrs.evolve(it, labels={**it.labels, **labels}, capacity=capacity))
        return out

    async def incompatible_instance_types(self, nodeclass: Mapping[str, Any]) -> IncompatibleInstanceTypes:
        """The types :meth:`get_instance_types` leaves out because no resolved AMI's requirements admit them,
        with the AMIs' requirements as the reason (Karpenter filters them out of the NodeClass's types).

        Raises:
            NodeClassNotReadyError: the NodeClass status has no subnets.
            CloudProviderError: EC2 could not be read.
        """
        try:
            types = await self.instance_types.incompatible(nodeclass)
        except NodeClassNotReadyError:
            raise
        except Exception as err:
            raise CloudProviderError(f"listing instance types: {err}") from err
        if not types:
            return IncompatibleInstanceTypes()
        return IncompatibleInstanceTypes(tuple(types), no_ami_reason(nodeclass))

    # Create -----------------------------------------------------------------------------------------------

    async def create(self, request: LaunchRequest) -> LaunchResult:
        """Launch (or adopt) the one instance of ``request.nodeclaim_name``.

        Raises:
            InsufficientCapacityError: nothing compatible and available, or EC2 had no capacity.
            NodeClassNotReadyError: the NodeClass status lacks subnets, security groups, AMIs or a profile.
            CloudProviderError: any other failure; no instance is left behind.
            NotLeader: the leader fence refused a write (launch template, CreateFleet): nothing was sent, and it is
                not a launch failure. A later leader adopts an instance this launch may have made (by its
                ``karpenter.sh/nodeclaim`` tag).
        """
        existing = await self.instances.find_by_nodeclaim(request.nodeclaim_name)
        if existing is not None:
            log.info("adopting instance", nodeclaim=request.nodeclaim_name, instance_id=existing.instance_id)
            # adopted as it is: its group is the one the NodeClass resolves to now, if any (never refused)
            group = (await self.placement_groups.lookup(request.nodeclass)).group
            return await self._result(request, existing, group)
        status = request.nodeclass.get("status") or {}
        missing = [k for k in ("subnets", "securityGroups", "amis", "instanceProfile") if not status.get(k)]
        if missing:
            name = (request.nodeclass.get("metadata") or {}).get("name", "")
            raise NodeClassNotReadyError(f"EC2NodeClass {name!r} has no resolved {', '.join(missing)}")
        group = await self._placement_group(request.nodeclass)
        try:
            placement = launch_placement(group, request.requirements)
            instance_id = await self.instances.launch(request, self._resource_tags(request), placement)
        except CloudProviderError:
            raise
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:  # launch templates, IAM, … : the protocol's generic, retryable error
            raise CloudProviderError(f"launching {request.nodeclaim_name}: {err}") from err
        try:
            instance = await self.instances.describe_launched(instance_id)
            if instance.capacity_reservation_id:  # counted at launch already unless CreateFleet did not say where
                self.capacity_reservations.mark_launched(instance.capacity_reservation_id, instance_id)
            return await self._result(request, instance, group)
        except BaseException as err:
            await self.instances.terminate_quietly(instance_id)  # never leak an instance the NodeClaim cannot record
            if isinstance(err, Exception) and not isinstance(err, CloudProviderError):
                raise CloudProviderError(f"recording instance {instance_id}: {err}") from err
            raise

    def _resource_tags(self, request: LaunchRequest) -> dict[str, str]:
        """Karpenter's launch tags over the NodeClass ``spec.tags`` (restricted keys cannot be overridden)."""
        user = {
            str(k): str(v)
            for k, v in ((request.nodeclass.get("spec") or {}).get("tags") or {}).items()
            if k not in RESTRICTED_TAGS and not str(k).startswith(RESTRICTED_TAG_PREFIXES)
        }
        return {
            **user,
            wk.cluster_tag(self.cluster_name): "owned",
            wk.TAG_EKS_CLUSTER_NAME: self.cluster_name,
            wk.TAG_NODEPOOL: request.nodepool_name,
            wk.TAG_NODECLAIM: request.nodeclaim_name,
            wk.TAG_NODECLASS: str((request.nodeclass.get("metadata") or {}).get("name", "")),
        }

    async def _placement_group(self, nodeclass: Mapping[str, Any]) -> PlacementGroup | None:
        """The EC2NodeClass's placement group (None without a selector). A failed read uses the last group found
        (Karpenter launches with it too).

        Raises:
            NodeClassNotReadyError: the selector names no group karpy knows (Karpenter's NodeClass is not Ready
                then: ``PlacementGroupReady=False``; karpy refuses rather than launch outside the group).
        """
        lookup = await self.placement_groups.lookup(nodeclass)
        if lookup.group is None and (selector := selector_of(nodeclass)) is not None:
            name = (nodeclass.get("metadata") or {}).get("name", "")
            why = lookup.error or "not found"
            raise NodeClassNotReadyError(f"EC2NodeClass {name!r}: placement group {selector.text!r}: {why}")
        return lookup.group

    async def _result(
        self, request: LaunchRequest, instance: CloudInstance, group: PlacementGroup | None = None
    ) -> LaunchResult:
        it = next((t for t in request.instance_types if t.name == instance.instance_type), None)
        if it is None:  # adopted: its type may be one the NodeClass's AMIs no longer admit
            catalogue = [  # a new list: the provider's cached one must not grow
                *await self.get_instance_types(request.nodeclass),
                *(await self.incompatible_instance_types(request.nodeclass)).instance_types,
            ]
            it = next((t for t in catalogue if t.name == instance.instance_type), None)
        if it is None:
            raise CloudProviderError(f"instance type {instance.instance_type} of {instance.instance_id} is unknown")
        zone_id = next((o.zone_id for o in it.offerings if o.zone == instance.zone), "")
        labels = {
            **it.labels,
            wk.LABEL_ZONE: instance.zone,
            wk.LABEL_REGION: self.region,
            wk.LABEL_CAPACITY_TYPE: instance.capacity_type,
        }
        if zone_id:
            labels[wk.LABEL_ZONE_ID] = zone_id
        partition = None
        if (
            group is not None
            and group.strategy == STRATEGY_PARTITION
            and required_partition(request.requirements) is None
        ):
            partition = await instance_partition(self.clients.ec2, instance.instance_id)
        for key in (wk.LABEL_PLACEMENT_GROUP_ID, wk.LABEL_PLACEMENT_GROUP_PARTITION):  # the group now, not the plan's
            labels.pop(key, None)
        labels.update(nodeclaim_labels(group, request.requirements, partition))
        labels.update(cr.instance_labels(instance))
        if instance.capacity_reservation_id:  # an adopted instance: its slot returns when it is terminated
            self.capacity_reservations.remember(instance.capacity_reservation_id, instance.instance_id)
        return LaunchResult(
            provider_id=instance.provider_id,
            instance_id=instance.instance_id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            image_id=instance.image_id,
            capacity={k: v for k, v in it.capacity.items() if v},
            allocatable={k: v for k, v in it.allocatable.items() if v},
            labels=labels,
        )

    async def placement_group_drift(self, nodeclass: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
        """``PlacementGroupDrift`` when the NodeClaim's ``karpenter.k8s.aws/placement-group-id`` label (in
        ``labels``) is not the group ``nodeclass``'s selector resolves to now, "" when it is (AWS
        ``isPlacementGroupDrifted``); None when the group cannot be read and none is known (not judged)."""
        lookup = await self.placement_groups.lookup(nodeclass)
        if lookup.error and lookup.group is None:
            return None
        return placement_group_drift(labels, lookup.group)

    # Read / delete ----------------------------------------------------------------------------------------

    async def get(self, provider_id: str) -> CloudInstance:
        """The instance behind ``provider_id``.

        Raises:
            NodeClaimNotFoundError: terminated, unknown, or not an AWS providerID.
            CloudProviderError: EC2 refused.
        """
        return await self.instances.get(_instance_id(provider_id))

    async def delete(self, provider_id: str) -> None:
        """TerminateInstances unless already shutting down (Karpenter ``instance.Delete``).

        Raises:
            NodeClaimNotFoundError: the instance is terminated or unknown: termination is complete.
            CloudProviderError: EC2 refused; the caller retries.
        """
        instance_id = _instance_id(provider_id)
        try:
            await self.instances.delete(instance_id)
        except NodeClaimNotFoundError:
            self.capacity_reservations.mark_terminated(instance_id)  # Karpenter MarkTerminated: gone, slot returned
            raise

    async def create_tags(self, provider_id: str, tags: Mapping[str, str]) -> None:
        """CreateTags ``tags`` on the instance behind ``provider_id`` (Karpenter AWS ``instance.CreateTags``).

        Raises:
            NodeClaimNotFoundError: the instance is unknown, or ``provider_id`` is not an AWS providerID.
            CloudProviderError: EC2 refused; the caller retries.
        """
        await self.instances.create_tags(_instance_id(provider_id), tags)

    async def list(self) -> list[CloudInstance]:
        """Live instances tagged ``kubernetes.io/cluster/<name>=owned`` that carry a ``karpenter.sh/nodepool`` tag.

        Raises:
            CloudProviderError: EC2 could not be read.
        """
        return await self.instances.list()

    # Interruption and garbage collection -------------------------------------------------------------------

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str, reservation_id: str = "") -> None:
        """Put one offering in the ICE cache for 3 minutes (a spot interruption warning: Karpenter marks the
        interrupted offering so the replacement is launched elsewhere); a reserved offering by its reservation
        (a capacity-reservation interruption warning)."""
        if capacity_type == wk.CAPACITY_TYPE_RESERVED and reservation_id:
            capacity_type = cr.unavailable_key(reservation_id)
        self.unavailable.mark(capacity_type, instance_type, zone)
        log.info("offering unavailable", capacity_type=capacity_type, instance_type=instance_type, zone=zone)

    def repair_policies(self) -> Sequence[RepairPolicy]:
        """Karpenter AWS ``RepairPolicies``: the v1.15 set, or the legacy one with ``legacy_repair_policies``."""
        return LEGACY_REPAIR_POLICIES if self.legacy_repair_policies else REPAIR_POLICIES

    async def delete_unused_launch_templates(self, nodeclasses: Collection[str]) -> tuple[str, ...]:
        """Delete this cluster's launch templates that no launch needs (see
        :func:`karpy.aws.launchtemplates.unused_templates`); ``nodeclasses`` are the existing EC2NodeClass
        names. Returns the deleted names.

        Raises:
            CloudProviderError: EC2 could not be read or refused a deletion.
        """
        provider = self.launch_templates
        try:
            owned = await provider.list_owned()
            unused = unused_templates(
                owned,
                nodeclasses=nodeclasses,
                last_used=provider.last_used,
                started=provider.started,
                now=provider.clock(),
            )
            return tuple([t.name for t in unused if await provider.delete(t)])
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:
            raise CloudProviderError(f"launch template garbage collection: {err}") from err


def _instance_id(provider_id: str) -> str:
    """The instance id of an AWS providerID.

    Raises:
        NodeClaimNotFoundError: not an AWS providerID (no instance can be behind it).
    """
    try:
        return parse_provider_id(provider_id)
    except ValueError as err:
        raise NodeClaimNotFoundError(str(err)) from err
