"""EC2 instances: launch with CreateFleet, read, list and terminate (Karpenter AWS
``pkg/providers/instance/{instance.go,types.go}``).

:meth:`InstanceProvider.launch` narrows the candidate types by the NodeClaim requirements and the resolved AMIs,
picks the capacity type and the launch candidates (:mod:`karpy.aws.instancefilters`), ensures one launch
template per (AMI, kubelet resources) group (:mod:`karpy.aws.launchtemplates`) and calls CreateFleet ``instant``
for one instance with instance type × subnet overrides (one subnet per zone, the one with most free IPs),
``lowest-price`` for on-demand and ``price-capacity-optimized`` for spot (with NodeOverlay prices: each override's
overlaid price as ``Priority``, ``prioritized``/``capacity-optimized-prioritized``). ICE fleet errors mark the offerings
unavailable for 3 minutes (:class:`karpy.aws.cache.UnavailableOfferings`) and raise
``InsufficientCapacityError``. A launch template that vanished is forgotten and CreateFleet retried once, as
Karpenter does.

Retries use ``tenacity`` (the AWS SDK's own throttling/5xx retries are botocore's, see :mod:`karpy.aws.session`):
both loops here are short, bounded and inside one call, so they need no jitter and no runtime supervision,
which is what :class:`karpy.runtime.singleton.Backoff` is for.

moto notes (checked in moto 5.2's ``ec2/models/fleets.py``): instant fleets honour the fleet's instance
TagSpecifications, the launch template's UserData and the override's SubnetId; they ignore the launch
template's security groups (template-level or on its NetworkInterfaces), its Placement and IamInstanceProfile and
the fleet's volume tags, and pick the first override (karpy orders overrides cheapest first, so that is the
cheapest). Nothing here works around those gaps: the test environment does (``e2e/cluster/aws.py``,
``e2e/cluster/placementgroups.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
)

import karpy.metrics_runtime as runtime_metrics
from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.aws import capacityreservations as cr
from karpy.aws.amis import ami_for, no_ami_reason
from karpy.aws.cache import UnavailableOfferings
from karpy.aws.errors import SPOT_ROLE_CODES, error_code, is_ice, is_launch_template_not_found, is_not_found
from karpy.aws.instancefilters import choose_capacity_type, launch_candidates
from karpy.aws.launchtemplates import LaunchTemplateProvider
from karpy.aws.requirements import labels_allow
from karpy.aws.subnets import subnet_per_zone
from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProviderError,
    InstanceType,
    InsufficientCapacityError,
    LaunchRequest,
    NodeClaimNotFoundError,
    Offering,
)
from karpy.runtime.fence import NotLeader

log = structlog.get_logger("karpy.aws.instances")
LIVE_STATES: Final = ("pending", "running", "stopping", "stopped", "shutting-down")
# DescribeInstances after CreateFleet: 6 reads 0.2 s doubling apart (about 6 s in all) before a launch counts as
# lost (EC2 is eventually consistent: a just-launched id may be NotFound for a moment).
DESCRIBE_AFTER_LAUNCH_ATTEMPTS: Final = 6
DESCRIBE_AFTER_LAUNCH_FIRST_WAIT: Final = 0.2


def ice_offerings(
    errors: Iterable[Mapping[str, Any]], subnet_zones: Mapping[str, str], capacity_type: str
) -> tuple[list[tuple[str, str, str]], bool]:
    """From CreateFleet ``Errors``: the (capacity type, instance type, zone) offerings to ICE-cache, and
    whether spot as a whole is unusable (service-linked role missing)."""
    marked: list[tuple[str, str, str]] = []
    spot_blocked = False
    for error in errors:
        code = str(error.get("ErrorCode") or "")
        if code in SPOT_ROLE_CODES:
            spot_blocked = True
            continue
        if not is_ice(code):
            continue
        overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        zone = overrides.get("AvailabilityZone") or subnet_zones.get(str(overrides.get("SubnetId")), "")
        instance_type = overrides.get("InstanceType")
        if instance_type and zone:
            lifecycle = str(error.get("Lifecycle") or capacity_type)
            marked.append((lifecycle, str(instance_type), str(zone)))
    return marked, spot_blocked


# Karpenter AWS ``pkg/errors/errors.go`` ``ToReasonMessage``, after its authorization cases: (substring of
# "<code>: <message>", reason), first match wins; anything else (ICE codes among them) is ``LaunchFailed``.
_LAUNCH_FAILURE_REASONS: Final = (
    ("iamInstanceProfile.name is invalid", "InstanceProfileNameInvalid"),
    ("InvalidLaunchTemplateId.NotFound", "LaunchTemplateNotFound"),
    ("User data is limited to", "UserDataSizeLimitExceeded"),
    ("InvalidAMIID.Malformed", "InvalidAMIID"),
    ("InvalidAMIID.NotFound", "AMINotFound"),
    ("RequestLimitExceeded", "RequestLimitExceeded"),
    ("InternalError", "InternalError"),
    ("not eligible for Free Tier", "FreeTierIneligible"),
    ("MaxFleetCountExceeded", "FleetQuotaExceeded"),
    ("PendingVerification", "AccountPendingVerification"),
    ("MaxSpotInstanceCountExceeded", "SpotQuotaExceeded"),
    ("VcpuLimitExceeded", "VCPULimitExceeded"),
    ("InsufficientFreeAddressesInSubnet", "InsufficientFreeAddressesInSubnet"),
)


def launch_failure_reason(code: str, message: str) -> str:
    """The ``reason`` label of one CreateFleet error (Karpenter AWS ``ToReasonMessage``), e.g.
    ``VCPULimitExceeded``; ``LaunchFailed`` for what it does not categorise."""
    text = f"{code}: {message}"
    if "AuthFailure.ServiceLinkedRoleCreationNotPermitted" in text:
        return "SpotSLRCreationFailed"
    if "UnauthorizedOperation" in text or "AccessDenied" in text or "AuthFailure" in text:
        return "AMIAuthorizationFailure" if "Not authorized for images" in text else "Unauthorized"
    if "InvalidParameter" in text and "belong to different networks" in text:
        return "SecurityGroupSubnetVPCMismatch"
    return next((reason for part, reason in _LAUNCH_FAILURE_REASONS if part in text), "LaunchFailed")


def count_launch_failures(errors: Iterable[Mapping[str, Any]], status: Mapping[str, Any], capacity_type: str) -> None:
    """``karpenter_cloudprovider_instance_launch_failures_total{zone, zone_id, capacity_type, reason}``: one per
    CreateFleet error (per offering, not per NodeClaim), the zone ID resolved from the NodeClass subnets
    (Karpenter AWS ``instance.go`` ``updateUnavailableOfferingsCache``)."""
    subnets = list(status.get("subnets") or [])
    zone_ids = {str(s.get("zone")): str(s.get("zoneID") or "") for s in subnets}
    subnet_zones = {str(s.get("id")): str(s.get("zone")) for s in subnets}
    for error in errors:
        overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        zone = str(overrides.get("AvailabilityZone") or subnet_zones.get(str(overrides.get("SubnetId")), ""))
        reason = launch_failure_reason(str(error.get("ErrorCode") or ""), str(error.get("ErrorMessage") or ""))
        runtime_metrics.INSTANCE_LAUNCH_FAILURES.labels(zone, zone_ids.get(zone, ""), capacity_type, reason).inc()


def provider_id(zone: str, instance_id: str) -> str:
    """``aws:///<zone>/<instance-id>`` (the Kubernetes AWS cloud provider's format)."""
    return f"aws:///{zone}/{instance_id}"


def parse_provider_id(value: str) -> str:
    """The instance id from ``aws:///<zone>/<id>`` (also accepts a bare id).

    Raises:
        ValueError: not an AWS providerID.
    """
    instance_id = value.rsplit("/", 1)[-1]
    if not instance_id.startswith("i-"):
        raise ValueError(f"not an AWS providerID: {value!r}")
    return instance_id


def to_cloud_instance(instance: Mapping[str, Any], reserved_capacity: bool = False) -> CloudInstance:
    """A DescribeInstances entry as a :class:`CloudInstance` (spot when ``InstanceLifecycle`` says so; with the
    ``ReservedCapacity`` gate, reserved when launched into a capacity reservation,
    :func:`karpy.aws.capacityreservations.instance_fields`)."""
    zone = str((instance.get("Placement") or {}).get("AvailabilityZone") or "")
    launched = instance.get("LaunchTime")
    if not isinstance(launched, datetime):
        launched = datetime.now(UTC)
    elif launched.tzinfo is None:
        launched = launched.replace(tzinfo=UTC)
    fields: dict[str, Any] = {
        "capacity_type": wk.CAPACITY_TYPE_SPOT
        if instance.get("InstanceLifecycle") == "spot"
        else wk.CAPACITY_TYPE_ON_DEMAND,
        **cr.instance_fields(instance, reserved_capacity),
    }
    return CloudInstance(
        instance_id=str(instance["InstanceId"]),
        provider_id=provider_id(zone, str(instance["InstanceId"])),
        instance_type=str(instance.get("InstanceType") or ""),
        zone=zone,
        state=str((instance.get("State") or {}).get("Name") or ""),
        image_id=str(instance.get("ImageId") or ""),
        launch_time=launched,
        tags={t["Key"]: t["Value"] for t in instance.get("Tags") or []},
        subnet_id=str(instance.get("SubnetId") or ""),
        security_group_ids=tuple(str(g["GroupId"]) for g in instance.get("SecurityGroups") or []),
        **fields,
    )


def names(types: Sequence[InstanceType], limit: int = 5) -> str:
    """``a, b, c`` of the first ``limit`` type names, ``, …`` when there are more."""
    text = ", ".join(it.name for it in types[:limit])
    return text + (", …" if len(types) > limit else "")


class InstanceProvider:
    """CreateFleet, DescribeInstances and TerminateInstances for this cluster's instances.

    Args:
        ec2: an open aiobotocore EC2 client.
        cluster_name: instances are found by the tag ``kubernetes.io/cluster/<name>=owned``.
        unavailable: the ICE cache launches mark and read.
        launch_templates: ensures the templates a fleet names.
        sleep: awaited between DescribeInstances reads after a launch (tests inject one that returns at once).
        reservations: the capacity reservations' free counts (``ReservedCapacity`` gate on; None: off).
    """

    def __init__(
        self,
        ec2: Any,
        cluster_name: str,
        *,
        unavailable: UnavailableOfferings,
        launch_templates: LaunchTemplateProvider,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        reservations: cr.CapacityReservationProvider | None = None,
    ) -> None:
        self.ec2 = ec2
        self.reservations = reservations
        self.cluster_name = cluster_name
        self.unavailable = unavailable
        self.launch_templates = launch_templates
        self.sleep = sleep

    # Launch -----------------------------------------------------------------------------------------------

    async def launch(
        self, request: LaunchRequest, tags: Mapping[str, str], placement: Mapping[str, Any] | None = None
    ) -> str:
        """Launch one instance for ``request`` (its NodeClass status resolved), tagged with ``tags``, into
        ``placement`` (the launch templates' placement group fields); returns its id.

        Raises:
            InsufficientCapacityError: no type has a compatible AMI or available offering, or EC2 had no capacity.
            CloudProviderError: CreateFleet failed otherwise.
            Exception: launch templates could not be ensured (the caller wraps it).
        """
        status = request.nodeclass.get("status") or {}
        subnets = subnet_per_zone(status.get("subnets") or [])
        amis = list(status.get("amis") or [])
        allowed = [it for it in request.instance_types if labels_allow(request.requirements, it.labels)]
        types = [it for it in allowed if ami_for(amis, it.labels) is not None]
        if allowed and not types:
            # The AMIs changed since the plan (get_instance_types leaves such types out): keep their offerings
            # away from the next plans for the ICE TTL too, so the re-plan does not pick them again.
            self._mark_types_unavailable(allowed)
            raise InsufficientCapacityError(
                f"no AMI for any of {len(allowed)} instance types ({names(allowed)}): "
                f"{no_ami_reason(request.nodeclass)}"
            )
        if self.reservations is not None:  # the plan's free counts may predate other launches into a reservation
            types = cr.refresh(types, self.reservations.available, self.unavailable.is_unavailable)
        capacity_type = choose_capacity_type(types, request.requirements, subnets)
        if capacity_type is None:
            raise InsufficientCapacityError(
                f"no available offering for {len(request.instance_types)} instance types in zones {sorted(subnets)}"
            )
        candidates = launch_candidates(types, request.requirements, subnets, capacity_type)
        # NodeOverlay prices (Karpenter AWS ``instance.go``: the price-overlay-applied NodeClaim): EC2 would rank by
        # its own prices, so each override gets its overlaid price as Priority under a prioritized strategy.
        prioritized = any(o.price_overlaid for it in request.instance_types for o in it.offerings)
        options: JSON | None = None
        held: list[str] = []
        if capacity_type == wk.CAPACITY_TYPE_RESERVED and self.reservations is not None:
            candidates = cr.reserved_candidates(candidates)
            options = cr.fleet_options(candidates[0][1][0])
            held = [o.reservation_id for _, offerings in candidates for o in offerings]
            self.reservations.hold(held)  # no await since refresh: concurrent launches see these taken
        try:
            configs = await self._launch_template_configs(
                request, candidates, subnets, capacity_type, tags, placement, prioritized
            )
            response = await self.create_fleet(configs, capacity_type, tags, options, prioritized=prioritized)
            instance_ids = [i for entry in response.get("Instances") or [] for i in entry.get("InstanceIds") or []]
            if held and instance_ids and self.reservations is not None:
                zones = {str(s["id"]): str(s["zone"]) for s in status.get("subnets") or []}
                rid = cr.launched_reservation(response, candidates, zones)
                if rid:
                    self.reservations.mark_launched(rid, instance_ids[0])
        finally:
            if self.reservations is not None:
                self.reservations.release(held)
        errors = response.get("Errors") or []
        count_launch_failures(errors, status, capacity_type)
        if not instance_ids:
            if capacity_type == wk.CAPACITY_TYPE_RESERVED:
                self._mark_reservations(errors, status, candidates)
            else:
                self._mark_unavailable(errors, status, capacity_type)
            codes = sorted({str(e.get("ErrorCode")) for e in errors})
            # unfulfillable capacity in Karpenter's errors.go, the reservation codes among them
            # (InvalidCapacityReservationState.Unavailable: the reservation ended since the plan)
            if not errors or any(is_ice(c) for c in codes):
                raise InsufficientCapacityError(f"CreateFleet launched nothing ({', '.join(codes) or 'no error'})")
            raise CloudProviderError(f"CreateFleet failed: {errors[0].get('ErrorMessage') or codes}")
        for extra in instance_ids[1:]:  # TotalTargetCapacity=1: never keep more than one
            await self.terminate_quietly(extra)
        return str(instance_ids[0])

    async def _launch_template_configs(
        self,
        request: LaunchRequest,
        candidates: Sequence[tuple[InstanceType, Sequence[Offering]]],
        subnets: Mapping[str, str],
        capacity_type: str,
        tags: Mapping[str, str],
        placement: Mapping[str, Any] | None = None,
        prioritized: bool = False,
    ) -> list[JSON]:
        """One LaunchTemplateConfig per (AMI, kubelet resources) group; overrides type × zone, cheapest first
        (``prioritized``: each with its price as ``Priority``)."""
        amis = list((request.nodeclass.get("status") or {}).get("amis") or [])
        lt_tags = {k: v for k, v in tags.items() if k != wk.TAG_NODECLAIM}
        groups: dict[str, tuple[str, list[JSON], float]] = {}
        for it, offerings in candidates:
            ami = ami_for(amis, it.labels)
            assert ami is not None  # filtered in launch
            # A reserved launch: one template per reservation (it names the reservation), Karpenter's resolver.
            per_template = [[o] for o in offerings] if capacity_type == wk.CAPACITY_TYPE_RESERVED else [list(offerings)]
            for group in per_template:
                target = group[0] if capacity_type == wk.CAPACITY_TYPE_RESERVED else None
                name = await self.launch_templates.ensure_for(
                    request, it, str(ami["id"]), capacity_type, lt_tags, placement, target
                )
                price = min(o.price for o in group)
                entry = groups.setdefault(name, (name, [], price))
                for offering in sorted(group, key=lambda o: (o.price, o.zone)):
                    override: JSON = {"InstanceType": it.name, "SubnetId": subnets[offering.zone]}
                    if prioritized:
                        override["Priority"] = offering.price
                    entry[1].append(override)
        ordered = sorted(groups.values(), key=lambda g: g[2])
        return [
            {"LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"}, "Overrides": overrides}
            for name, overrides, _ in ordered
        ]

    async def create_fleet(
        self,
        configs: list[JSON],
        capacity_type: str,
        tags: Mapping[str, str],
        options: Mapping[str, Any] | None = None,
        *,
        prioritized: bool = False,
    ) -> JSON:
        """CreateFleet ``instant`` for one instance of ``capacity_type`` over ``configs`` (LaunchTemplateConfigs),
        tagging instance, volume and fleet with ``tags``. A launch template that vanished is forgotten by the
        launch-template cache and the call retried once (Karpenter ``instance.go``). ``options`` replace the
        capacity-type parameters (a reserved launch: :func:`karpy.aws.capacityreservations.fleet_options`).

        Raises:
            InsufficientCapacityError: the call failed with an ICE code.
            CloudProviderError: any other failure.
        """
        tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        kwargs: JSON = {
            "Type": "instant",
            "LaunchTemplateConfigs": configs,
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": "spot" if capacity_type == wk.CAPACITY_TYPE_SPOT else "on-demand",
            },
            "TagSpecifications": [
                {"ResourceType": resource, "Tags": tag_list} for resource in ("instance", "volume", "fleet")
            ],
        }
        if capacity_type == wk.CAPACITY_TYPE_SPOT:
            strategy = "capacity-optimized-prioritized" if prioritized else "price-capacity-optimized"
            kwargs["SpotOptions"] = {"AllocationStrategy": strategy}
        else:
            kwargs["OnDemandOptions"] = {"AllocationStrategy": "prioritized" if prioritized else "lowest-price"}
        if options is not None:  # a reserved launch (capacity reservation targeting)
            kwargs.pop("OnDemandOptions", None)
            kwargs["TargetCapacitySpecification"]["DefaultTargetCapacityType"] = options["DefaultTargetCapacityType"]
            kwargs.update({k: v for k, v in options.items() if k != "DefaultTargetCapacityType"})
            if prioritized and "OnDemandOptions" in kwargs:  # an ODCR launch with overlaid prices (Karpenter types.go)
                kwargs["OnDemandOptions"] = {"AllocationStrategy": "prioritized"}

        def forget_templates(_state: RetryCallState) -> None:
            for config in configs:  # re-created by the next ensure
                self.launch_templates.invalidate(config["LaunchTemplateSpecification"]["LaunchTemplateName"])

        async def call() -> JSON:  # aiobotocore's methods are not coroutine functions tenacity recognises
            response: JSON = await self.ec2.create_fleet(**kwargs)
            return response

        retrying = AsyncRetrying(
            retry=retry_if_exception(is_launch_template_not_found),
            stop=stop_after_attempt(2),
            before_sleep=forget_templates,
            reraise=True,
        )
        try:
            return await retrying(call)
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:
            code = error_code(err)
            if is_ice(code):
                raise InsufficientCapacityError(f"CreateFleet: {code}") from err
            raise CloudProviderError(f"CreateFleet: {err}") from err

    def _mark_types_unavailable(self, types: Sequence[InstanceType]) -> None:
        """Every available offering of ``types`` into the unavailable-offerings cache (3 minutes)."""
        for it in types:
            for offering in it.offerings:
                if offering.available:
                    self.unavailable.mark(offering.capacity_type, it.name, offering.zone)
        log.info("offerings unavailable", instance_types=names(types))

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

    def _mark_reservations(
        self, errors: Sequence[Mapping[str, Any]], status: Mapping[str, Any], candidates: cr.Candidates
    ) -> None:
        """A reserved launch failed (Karpenter ``updateUnavailableOfferingsCache``, reserved branch): a full
        reservation (``ReservationCapacityExceeded``) is taken as having no free instance until the next sync
        from EC2; another insufficient-capacity error keeps that reservation's offering out for 3 minutes."""
        subnet_zones = {str(s["id"]): str(s["zone"]) for s in status.get("subnets") or []}
        for rid, instance_type, zone, code in cr.failed_reservations(errors, candidates, subnet_zones):
            if code == cr.EXCEEDED:
                if self.reservations is not None:
                    self.reservations.set_available(rid, 0)
            else:
                self.unavailable.mark(cr.unavailable_key(rid), instance_type, zone)
            log.info("reserved offering unavailable", reservation=rid, type=instance_type, zone=zone, error=code)

    # Read -------------------------------------------------------------------------------------------------

    async def _describe(self, **kwargs: Any) -> list[JSON]:
        instances: list[JSON] = []
        paginator = self.ec2.get_paginator("describe_instances")
        async for page in paginator.paginate(**kwargs):
            for reservation in page.get("Reservations") or []:
                instances.extend(reservation.get("Instances") or [])
        return instances

    async def describe_launched(self, instance_id: str) -> CloudInstance:
        """A just-launched instance. EC2 is eventually consistent: DescribeInstances may answer NotFound for a
        moment after CreateFleet returned the id, so NotFound is read again (about 6 s in all) rather than taken
        as a failed launch, which would terminate a good instance.

        Raises:
            CloudProviderError: still not found, or EC2 refused.
        """
        retrying = AsyncRetrying(
            stop=stop_after_attempt(DESCRIBE_AFTER_LAUNCH_ATTEMPTS),
            wait=wait_exponential(multiplier=DESCRIBE_AFTER_LAUNCH_FIRST_WAIT),
            retry=retry_if_result(lambda found: found is None),
            retry_error_callback=lambda _state: None,
            sleep=self.sleep,
        )
        instance: CloudInstance | None = await retrying(self.describe_one, instance_id)
        if instance is None:
            raise CloudProviderError(f"launched instance {instance_id} not found")
        return instance

    async def describe_one(self, instance_id: str) -> CloudInstance | None:
        """The instance ``instance_id`` in any state; None when EC2 does not know it.

        Raises:
            CloudProviderError: EC2 refused.
        """
        try:
            found = await self._describe(InstanceIds=[instance_id])
        except Exception as err:
            if is_not_found(err):
                return None
            raise CloudProviderError(f"DescribeInstances {instance_id}: {err}") from err
        return to_cloud_instance(found[0], self.reservations is not None) if found else None

    async def find_by_nodeclaim(self, nodeclaim_name: str) -> CloudInstance | None:
        """The oldest live (not shutting-down) instance of this cluster tagged ``karpenter.sh/nodeclaim=<name>``.

        Raises:
            CloudProviderError: EC2 could not be read.
        """
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
        instances = sorted(
            (to_cloud_instance(i, self.reservations is not None) for i in found),
            key=lambda i: (i.launch_time, i.instance_id),
        )
        return instances[0] if instances else None

    async def get(self, instance_id: str) -> CloudInstance:
        """The instance ``instance_id`` unless terminated.

        Raises:
            NodeClaimNotFoundError: terminated or unknown.
            CloudProviderError: EC2 refused.
        """
        instance = await self.describe_one(instance_id)
        if instance is None or instance.state == "terminated":
            raise NodeClaimNotFoundError(f"instance {instance_id} not found")
        return instance

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
        return [to_cloud_instance(i, self.reservations is not None) for i in found]

    # Tag --------------------------------------------------------------------------------------------------

    async def create_tags(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """CreateTags ``tags`` on instance ``instance_id`` (Karpenter AWS ``instance.CreateTags``; existing keys
        are overwritten, others kept). Throttling and 5xx are retried by botocore's standard mode.

        Raises:
            NodeClaimNotFoundError: the instance is unknown.
            CloudProviderError: EC2 refused; the caller retries.
        """
        try:
            await self.ec2.create_tags(
                Resources=[instance_id], Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())]
            )
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:
            if is_not_found(err):
                raise NodeClaimNotFoundError(f"instance {instance_id} not found") from err
            raise CloudProviderError(f"CreateTags {instance_id}: {err}") from err
        log.info("tagged instance", instance_id=instance_id, tags=sorted(tags))

    # Terminate --------------------------------------------------------------------------------------------

    async def delete(self, instance_id: str) -> None:
        """TerminateInstances unless already shutting down (Karpenter ``instance.Delete``); a reserved instance's
        reservation is remembered for the slot it gives back (``CapacityReservationProvider.mark_terminated``).

        Raises:
            NodeClaimNotFoundError: the instance is terminated or unknown: termination is complete.
            CloudProviderError: EC2 refused; the caller retries.
        """
        instance = await self.get(instance_id)
        if self.reservations is not None and instance.capacity_reservation_id:
            # its slot is returned once it is gone (Karpenter reads the NodeClaim's reservation label): known here
            # also for an instance this process never launched nor adopted (launched before a restart)
            self.reservations.remember(instance.capacity_reservation_id, instance.instance_id)
        if instance.state == "shutting-down":
            return
        try:
            await self.ec2.terminate_instances(InstanceIds=[instance.instance_id])
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:
            # zone_id "": karpy's instance view carries the zone name only.
            runtime_metrics.INSTANCE_TERMINATION_FAILURES.labels(instance.zone, "").inc()
            if is_not_found(err):
                raise NodeClaimNotFoundError(f"instance {instance.instance_id} not found") from err
            raise CloudProviderError(f"TerminateInstances {instance.instance_id}: {err}") from err
        log.info("terminated instance", instance_id=instance.instance_id, provider_id=instance.provider_id)

    async def terminate_quietly(self, instance_id: str) -> None:
        """TerminateInstances, logging instead of raising (garbage collection catches what this misses)."""
        try:
            await self.ec2.terminate_instances(InstanceIds=[instance_id])
            log.info("terminated instance after a failed launch", instance_id=instance_id)
        except NotLeader:  # the fence refused it: the leader's garbage collection or adoption takes the instance
            log.info("instance not terminated: not the leader", instance_id=instance_id)
        except Exception as err:  # best effort: garbage collection catches what this misses
            log.warning("could not terminate instance", instance_id=instance_id, error=str(err)[:200])
