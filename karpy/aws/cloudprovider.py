"""The AWS cloud provider: karpy's :class:`~karpy.cloudprovider.types.CloudProvider` on EC2 (Karpenter AWS
``pkg/cloudprovider`` + ``pkg/providers/instance``).

``create`` is idempotent by NodeClaim name: it first adopts a live instance tagged
``karpenter.sh/nodeclaim=<name>`` for this cluster (a restart between launch and the NodeClaim status write
must not launch twice); otherwise it narrows the candidate types by the NodeClaim requirements, picks the
capacity type, ensures one launch template per (AMI, kubelet resources) group with AL2023 nodeadm user data,
and calls CreateFleet ``instant`` for one instance with instance type × subnet overrides (one subnet per
zone, the one with most free IPs), ``lowest-price`` for on-demand and ``price-capacity-optimized`` for spot.
ICE fleet errors mark the offerings unavailable for 3 minutes and raise ``InsufficientCapacityError``.
Anything failing after an instance exists terminates it.

moto notes (checked in moto 5.2's ``ec2/models/fleets.py``): instant fleets honour the fleet's instance
TagSpecifications, the launch template's UserData and the override's SubnetId; they ignore the launch
template's SecurityGroupIds and IamInstanceProfile and the fleet's volume tags, and pick the first override
(karpy orders overrides cheapest first, so that is the cheapest). Nothing here works around those gaps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

import structlog

from karpy.apis import labels as wk
from karpy.aws import nodeclass as nodeclass_resolution
from karpy.aws.errors import error_code, is_ice, is_launch_template_not_found, is_not_found
from karpy.aws.instances import (
    LIVE_STATES,
    ami_for,
    ami_requirements_text,
    choose_capacity_type,
    ice_offerings,
    labels_allow,
    launch_candidates,
    parse_provider_id,
    to_cloud_instance,
)
from karpy.aws.instancetypes import InstanceTypeProvider, UnavailableOfferings, format_reserved, kubelet_resources
from karpy.aws.launchtemplates import LaunchTemplateProvider, template_data, unused_templates
from karpy.aws.nodeclass import NodeClassResolution
from karpy.aws.pricing import PricingProvider
from karpy.aws.session import AWSClients
from karpy.aws.userdata import DEFAULT_CLUSTER_DNS, DEFAULT_SERVICE_CIDR, NodeAdmInput, render
from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProviderError,
    IncompatibleInstanceTypes,
    InstanceType,
    InsufficientCapacityError,
    LaunchRequest,
    LaunchResult,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
)

log = structlog.get_logger("karpy.aws.cloudprovider")
JSON = dict[str, Any]
# DescribeInstances retries after CreateFleet (0.2 s doubling: about 6 s in all) before a launch counts as lost.
DESCRIBE_AFTER_LAUNCH_ATTEMPTS: Final = 5
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clients = clients
        self.cluster_name = cluster_name
        self.cluster_endpoint = cluster_endpoint
        self.cluster_ca_bundle = cluster_ca_bundle
        self.region = region
        self.k8s_version = k8s_version
        self.cluster_cidr = cluster_cidr
        self.cluster_dns = tuple(cluster_dns)
        self.unavailable = UnavailableOfferings(clock)
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
        self.launch_templates = LaunchTemplateProvider(clients.ec2, cluster_name, clock)

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
        )

    # Catalogue --------------------------------------------------------------------------------------------

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> list[InstanceType]:
        """Instance types launchable under ``nodeclass`` (see :mod:`karpy.aws.instancetypes`).

        Raises:
            NodeClassNotReadyError: the NodeClass status has no subnets.
            CloudProviderError: EC2 could not be read.
        """
        try:
            return await self.instance_types.list(nodeclass)
        except NodeClassNotReadyError:
            raise
        except Exception as err:
            raise CloudProviderError(f"listing instance types: {err}") from err

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
        """
        existing = await self._find_by_nodeclaim(request.nodeclaim_name)
        if existing is not None:
            log.info("adopting instance", nodeclaim=request.nodeclaim_name, instance_id=existing.instance_id)
            return await self._result(request, existing)
        status = request.nodeclass.get("status") or {}
        missing = [k for k in ("subnets", "securityGroups", "amis", "instanceProfile") if not status.get(k)]
        if missing:
            name = (request.nodeclass.get("metadata") or {}).get("name", "")
            raise NodeClassNotReadyError(f"EC2NodeClass {name!r} has no resolved {', '.join(missing)}")
        try:
            instance_id = await self._launch(request, status)
        except CloudProviderError:
            raise
        except Exception as err:  # launch templates, IAM, … : the protocol's generic, retryable error
            raise CloudProviderError(f"launching {request.nodeclaim_name}: {err}") from err
        try:
            instance = await self._describe_launched(instance_id)
            return await self._result(request, instance)
        except BaseException as err:
            await self._terminate_quietly(instance_id)  # never leak an instance the NodeClaim cannot record
            if isinstance(err, Exception) and not isinstance(err, CloudProviderError):
                raise CloudProviderError(f"recording instance {instance_id}: {err}") from err
            raise

    async def _launch(self, request: LaunchRequest, status: Mapping[str, Any]) -> str:
        subnets = _subnet_per_zone(status.get("subnets") or [])
        amis = list(status.get("amis") or [])
        allowed = [it for it in request.instance_types if labels_allow(request.requirements, it.labels)]
        types = [it for it in allowed if _ami_for(amis, it) is not None]
        if allowed and not types:
            # The AMIs changed since the plan (get_instance_types leaves such types out): keep their offerings
            # away from the next plans for the ICE TTL too, so the re-plan does not pick them again.
            self._mark_types_unavailable(allowed)
            raise InsufficientCapacityError(
                f"no AMI for any of {len(allowed)} instance types ({_names(allowed)}): "
                f"{no_ami_reason(request.nodeclass)}"
            )
        capacity_type = choose_capacity_type(types, request.requirements, subnets)
        if capacity_type is None:
            raise InsufficientCapacityError(
                f"no available offering for {len(request.instance_types)} instance types in zones {sorted(subnets)}"
            )
        candidates = launch_candidates(types, request.requirements, subnets, capacity_type)
        configs = await self._launch_template_configs(request, candidates, subnets, capacity_type, amis)
        response = await self._create_fleet(request, configs, capacity_type)
        instance_ids = [i for entry in response.get("Instances") or [] for i in entry.get("InstanceIds") or []]
        errors = response.get("Errors") or []
        if not instance_ids:
            self._mark_unavailable(errors, status, capacity_type)
            codes = sorted({str(e.get("ErrorCode")) for e in errors})
            if not errors or any(is_ice(c) for c in codes):
                raise InsufficientCapacityError(f"CreateFleet launched nothing ({', '.join(codes) or 'no error'})")
            raise CloudProviderError(f"CreateFleet failed: {errors[0].get('ErrorMessage') or codes}")
        for extra in instance_ids[1:]:  # TotalTargetCapacity=1: never keep more than one
            await self._terminate_quietly(extra)
        return str(instance_ids[0])

    async def _launch_template_configs(
        self,
        request: LaunchRequest,
        candidates: Sequence[tuple[InstanceType, Sequence[Any]]],
        subnets: Mapping[str, str],
        capacity_type: str,
        amis: Sequence[Mapping[str, Any]],
    ) -> list[JSON]:
        """One LaunchTemplateConfig per (AMI, kubelet resources) group; overrides type × zone, cheapest first."""
        groups: dict[str, tuple[str, list[JSON], float]] = {}
        tags = self._resource_tags(request)
        for it, offerings in candidates:
            ami = _ami_for(amis, it)
            assert ami is not None  # filtered in _launch
            reserved = kubelet_resources(it.capacity, request.kubelet)
            user_data = render(
                NodeAdmInput(
                    cluster_name=self.cluster_name,
                    endpoint=self.cluster_endpoint,
                    ca_bundle=self.cluster_ca_bundle,
                    max_pods=reserved.max_pods,
                    kube_reserved=format_reserved(reserved.kube_reserved),
                    system_reserved=format_reserved(reserved.system_reserved),
                    eviction_hard=reserved.eviction_hard,
                    labels=self._node_labels(request, capacity_type),
                    taints=request.taints,
                    kubelet=request.kubelet,
                    cidr=self.cluster_cidr,
                    cluster_dns=self.cluster_dns,
                    custom_user_data=str((request.nodeclass.get("spec") or {}).get("userData") or ""),
                )
            )
            lt_tags = {k: v for k, v in tags.items() if k != wk.TAG_NODECLAIM}
            data = template_data(request.nodeclass, image_id=str(ami["id"]), user_data=user_data, tags=lt_tags)
            name = await self.launch_templates.ensure(data, lt_tags)
            price = min(o.price for o in offerings)
            entry = groups.setdefault(name, (name, [], price))
            for offering in sorted(offerings, key=lambda o: (o.price, o.zone)):
                entry[1].append({"InstanceType": it.name, "SubnetId": subnets[offering.zone]})
        ordered = sorted(groups.values(), key=lambda g: g[2])
        return [
            {"LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"}, "Overrides": overrides}
            for name, overrides, _ in ordered
        ]

    async def _create_fleet(self, request: LaunchRequest, configs: list[JSON], capacity_type: str) -> JSON:
        tags = [{"Key": k, "Value": v} for k, v in sorted(self._resource_tags(request).items())]
        kwargs: JSON = {
            "Type": "instant",
            "LaunchTemplateConfigs": configs,
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": "spot" if capacity_type == wk.CAPACITY_TYPE_SPOT else "on-demand",
            },
            "TagSpecifications": [
                {"ResourceType": resource, "Tags": tags} for resource in ("instance", "volume", "fleet")
            ],
        }
        if capacity_type == wk.CAPACITY_TYPE_SPOT:
            kwargs["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            kwargs["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        for attempt in (1, 2):
            try:
                response: JSON = await self.clients.ec2.create_fleet(**kwargs)
                return response
            except Exception as err:
                if attempt == 1 and is_launch_template_not_found(err):
                    for config in configs:  # re-created by the next ensure; retry once as Karpenter does
                        self.launch_templates.invalidate(config["LaunchTemplateSpecification"]["LaunchTemplateName"])
                    continue
                code = error_code(err)
                if is_ice(code):
                    raise InsufficientCapacityError(f"CreateFleet: {code}") from err
                raise CloudProviderError(f"CreateFleet: {err}") from err
        raise CloudProviderError("CreateFleet: launch template vanished twice")  # pragma: no cover

    def _mark_types_unavailable(self, types: Sequence[InstanceType]) -> None:
        """Every available offering of ``types`` into the unavailable-offerings cache (3 minutes)."""
        for it in types:
            for offering in it.offerings:
                if offering.available:
                    self.unavailable.mark(offering.capacity_type, it.name, offering.zone)
        log.info("offerings unavailable", instance_types=_names(types))

    def _mark_unavailable(
        self, errors: Sequence[Mapping[str, Any]], status: Mapping[str, Any], capacity_type: str
    ) -> None:
        subnet_zones = {str(s["id"]): str(s["zone"]) for s in status.get("subnets") or []}
        marked, spot_blocked = ice_offerings(errors, subnet_zones, capacity_type)
        for ct, instance_type, zone in marked:
            self.unavailable.mark(ct, instance_type, zone)
        if spot_blocked:
            self.unavailable.mark_capacity_type(wk.CAPACITY_TYPE_SPOT)
        if marked:
            log.info("offerings unavailable", offerings=[f"{ct}/{it}/{z}" for ct, it, z in marked][:20])

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

    @staticmethod
    def _node_labels(request: LaunchRequest, capacity_type: str) -> dict[str, str]:
        """kubelet ``--node-labels``: the NodeClaim's labels + capacity type + do-not-sync-taints (Karpenter)."""
        return {
            **request.labels,
            wk.LABEL_CAPACITY_TYPE: capacity_type,
            wk.LABEL_DO_NOT_SYNC_TAINTS: "true",
        }

    async def _result(self, request: LaunchRequest, instance: CloudInstance) -> LaunchResult:
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

    # Read / delete ----------------------------------------------------------------------------------------

    async def _describe(self, **kwargs: Any) -> list[JSON]:
        instances: list[JSON] = []
        paginator = self.clients.ec2.get_paginator("describe_instances")
        async for page in paginator.paginate(**kwargs):
            for reservation in page.get("Reservations") or []:
                instances.extend(reservation.get("Instances") or [])
        return instances

    async def _describe_launched(self, instance_id: str) -> CloudInstance:
        """A just-launched instance. EC2 is eventually consistent: DescribeInstances may answer NotFound for a
        moment after CreateFleet returned the id, so NotFound is retried (about 6 s in all) rather than taken as
        a failed launch, which would terminate a good instance.

        Raises:
            CloudProviderError: still not found, or EC2 refused.
        """
        for attempt in range(DESCRIBE_AFTER_LAUNCH_ATTEMPTS):
            instance = await self._describe_one(instance_id)
            if instance is not None:
                return instance
            await asyncio.sleep(0.2 * 2**attempt)
        raise CloudProviderError(f"launched instance {instance_id} not found")

    async def _describe_one(self, instance_id: str) -> CloudInstance | None:
        try:
            found = await self._describe(InstanceIds=[instance_id])
        except Exception as err:
            if is_not_found(err):
                return None
            raise CloudProviderError(f"DescribeInstances {instance_id}: {err}") from err
        return to_cloud_instance(found[0]) if found else None

    async def _find_by_nodeclaim(self, nodeclaim_name: str) -> CloudInstance | None:
        try:
            found = await self._describe(
                Filters=[
                    {"Name": f"tag:{wk.TAG_NODECLAIM}", "Values": [nodeclaim_name]},
                    {"Name": f"tag:{wk.cluster_tag(self.cluster_name)}", "Values": ["owned"]},
                    {"Name": "instance-state-name", "Values": [s for s in LIVE_STATES if s != "shutting-down"]},
                ]
            )
        except Exception as err:
            raise CloudProviderError(f"DescribeInstances: {err}") from err
        instances = sorted((to_cloud_instance(i) for i in found), key=lambda i: (i.launch_time, i.instance_id))
        return instances[0] if instances else None

    async def get(self, provider_id: str) -> CloudInstance:
        """The instance behind ``provider_id``.

        Raises:
            NodeClaimNotFoundError: terminated, unknown, or not an AWS providerID.
        """
        try:
            instance_id = parse_provider_id(provider_id)
        except ValueError as err:
            raise NodeClaimNotFoundError(str(err)) from err
        instance = await self._describe_one(instance_id)
        if instance is None or instance.state == "terminated":
            raise NodeClaimNotFoundError(f"instance {instance_id} not found")
        return instance

    async def delete(self, provider_id: str) -> None:
        """TerminateInstances unless already shutting down (Karpenter ``instance.Delete``).

        Raises:
            NodeClaimNotFoundError: the instance is terminated or unknown: termination is complete.
            CloudProviderError: EC2 refused; the caller retries.
        """
        instance = await self.get(provider_id)
        if instance.state == "shutting-down":
            return
        try:
            await self.clients.ec2.terminate_instances(InstanceIds=[instance.instance_id])
        except Exception as err:
            if is_not_found(err):
                raise NodeClaimNotFoundError(f"instance {instance.instance_id} not found") from err
            raise CloudProviderError(f"TerminateInstances {instance.instance_id}: {err}") from err
        log.info("terminated instance", instance_id=instance.instance_id, provider_id=provider_id)

    async def list(self) -> list[CloudInstance]:
        """Live instances tagged ``kubernetes.io/cluster/<name>=owned`` that carry a ``karpenter.sh/nodepool`` tag.

        Raises:
            CloudProviderError: EC2 could not be read.
        """
        try:
            found = await self._describe(
                Filters=[
                    {"Name": f"tag:{wk.cluster_tag(self.cluster_name)}", "Values": ["owned"]},
                    {"Name": "tag-key", "Values": [wk.TAG_NODEPOOL]},
                    {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
                ]
            )
        except Exception as err:
            raise CloudProviderError(f"DescribeInstances: {err}") from err
        return [to_cloud_instance(i) for i in found]

    # Interruption and garbage collection -------------------------------------------------------------------

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """Put one offering in the ICE cache for 3 minutes (a spot interruption warning: Karpenter marks the
        interrupted offering so the replacement is launched elsewhere)."""
        self.unavailable.mark(capacity_type, instance_type, zone)
        log.info("offering unavailable", capacity_type=capacity_type, instance_type=instance_type, zone=zone)

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
        except Exception as err:
            raise CloudProviderError(f"launch template garbage collection: {err}") from err

    async def _terminate_quietly(self, instance_id: str) -> None:
        try:
            await self.clients.ec2.terminate_instances(InstanceIds=[instance_id])
            log.info("terminated instance after a failed launch", instance_id=instance_id)
        except Exception as err:  # best effort: garbage collection catches what this misses
            log.warning("could not terminate instance", instance_id=instance_id, error=str(err)[:200])


def _subnet_per_zone(subnets: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """zone → subnet id: the first listed per zone (status lists subnets most-free-IPs first)."""
    chosen: dict[str, str] = {}
    for subnet in subnets:
        chosen.setdefault(str(subnet["zone"]), str(subnet["id"]))
    return chosen


def _ami_for(amis: Sequence[Mapping[str, Any]], it: InstanceType) -> Mapping[str, Any] | None:
    """The first resolved AMI whose requirements the instance type satisfies (Karpenter's AMI mapping)."""
    return ami_for(amis, it.labels)


def no_ami_reason(nodeclass: Mapping[str, Any]) -> str:
    """Why a type has no AMI: ``EC2NodeClass "<name>" resolves AMIs only for (<requirements>) or (…)``."""
    name = (nodeclass.get("metadata") or {}).get("name", "")
    amis = (nodeclass.get("status") or {}).get("amis") or []
    return f'EC2NodeClass "{name}" resolves AMIs only for {ami_requirements_text(amis) or "no instance type"}'


def _names(types: Sequence[InstanceType], limit: int = 5) -> str:
    """``a, b, c`` of the first ``limit`` type names, ``, …`` when there are more."""
    names = ", ".join(it.name for it in types[:limit])
    return names + (", …" if len(types) > limit else "")
