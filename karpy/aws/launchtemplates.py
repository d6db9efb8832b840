"""Launch templates: one per (NodeClass, AMI, kubelet resources, capacity type) group (Karpenter AWS
``pkg/providers/launchtemplate``).

Named ``karpenter.k8s.aws/<hash of the template data>``, so an identical request reuses the template and any change
(AMI, user data, security groups, profile, block devices, tags) yields a new one. Each holds the AMI, the AMI family's
user data (base64; :mod:`karpy.aws.amifamily`), the security groups, the instance profile, block device mappings (the
family's defaults, e.g. ``/dev/xvda`` 20Gi gp3 encrypted for AL2023), IMDS options (Karpenter's defaults: tokens
required, hop limit 1), the network interfaces (:mod:`karpy.aws.networkinterfaces`), the placement (tenancy and the
placement group, :mod:`karpy.aws.placementgroups`) and the cluster/NodeClass tags.
:meth:`LaunchTemplateProvider.ensure_for` renders the user data of one instance type of a launch (its kubelet
resources, the NodeClaim's labels and taints) and ensures its template. Names already ensured are remembered for
:data:`karpy.aws.cache.LAUNCH_TEMPLATES` (1 minute, Karpenter's LT cache TTL).

Garbage collection (Karpenter deletes a template when it leaves its cache and when its NodeClass is deleted):
:func:`unused_templates` picks the cluster's templates whose EC2NodeClass no longer exists, or that no launch
has used for :data:`karpy.aws.cache.LAUNCH_TEMPLATE_UNUSED` (5 minutes; after a restart the clock starts at
the provider's creation, so a restart never deletes a template a launch is about to use). Deleting a template
never affects running instances.
"""

from __future__ import annotations

import asyncio
import base64
import math
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import attrs
import structlog
from cachetools import LRUCache

from karpy.apis import labels as wk
from karpy.apis.hashing import stable_hash
from karpy.apis.meta import JSON
from karpy.apis.quantity import to_canonical
from karpy.aws import amifamily
from karpy.aws.cache import LAUNCH_TEMPLATE_UNUSED, LAUNCH_TEMPLATES, Timer, ttl_cache
from karpy.aws.capacityreservations import launch_template_fields
from karpy.aws.errors import is_already_exists, is_not_found
from karpy.aws.instancetypes import KubeletResources, format_reserved, kubelet_resources
from karpy.aws.networkinterfaces import network_interfaces
from karpy.aws.userdata import DEFAULT_CLUSTER_DNS, DEFAULT_SERVICE_CIDR, NodeAdmInput, bootstrap_options
from karpy.cloudprovider.types import InstanceType, LaunchRequest, Offering

log = structlog.get_logger("karpy.aws.launchtemplates")
USER_DATA_CACHE: Final = 1024  # distinct user data renders kept (a NodeClass x capacity type x kubelet set each)
NAME_PREFIX: Final = "karpenter.k8s.aws/"
DEFAULT_METADATA_OPTIONS: Final = {
    "HttpEndpoint": "enabled",
    "HttpProtocolIpv6": "disabled",
    "HttpPutResponseHopLimit": 1,
    "HttpTokens": "required",
    "InstanceMetadataTags": "disabled",
}


_EBS_FIELDS: Final = (
    ("volumeType", "VolumeType"),
    ("encrypted", "Encrypted"),
    ("deleteOnTermination", "DeleteOnTermination"),
    ("iops", "Iops"),
    ("throughput", "Throughput"),
    ("kmsKeyID", "KmsKeyId"),
    ("snapshotID", "SnapshotId"),
)


def _ec2_mapping(mapping: Mapping[str, Any]) -> JSON:
    ebs_spec = mapping.get("ebs") or {}
    ebs: JSON = {target: ebs_spec[source] for source, target in _EBS_FIELDS if ebs_spec.get(source) is not None}
    if ebs_spec.get("volumeSize"):
        ebs["VolumeSize"] = math.ceil(to_canonical("ephemeral-storage", ebs_spec["volumeSize"]) / 2**30)
    return {"DeviceName": mapping.get("deviceName", "/dev/xvda"), "Ebs": ebs}


def block_device_mappings(nodeclass: Mapping[str, Any], family: str | None = None) -> list[JSON]:
    """EC2 ``BlockDeviceMappings`` from ``spec.blockDeviceMappings`` (sizes rounded up to whole GiB); without
    any, the AMI family's defaults (Karpenter's ``DefaultBlockDeviceMappings``: AL2/AL2023 ``/dev/xvda`` 20Gi,
    Bottlerocket ``/dev/xvda`` 6Gi + ``/dev/xvdb`` 20Gi, Windows ``/dev/sda1`` 50Gi, gp3 encrypted, deleted on
    termination; Custom none: EC2 uses the AMI's). ``family`` defaults to the EC2NodeClass's."""
    spec = nodeclass.get("spec") or {}
    mappings = spec.get("blockDeviceMappings") or []
    if mappings:
        return [_ec2_mapping(m) for m in mappings]
    out = [_ec2_mapping(m) for m in amifamily.default_block_device_mappings(family or amifamily.family_of(spec))]
    for m in out:
        m["Ebs"]["DeleteOnTermination"] = True
    return out


def metadata_options(nodeclass: Mapping[str, Any]) -> JSON:
    """IMDS options: Karpenter's defaults overlaid by ``spec.metadataOptions``; instance tags always off."""
    spec = (nodeclass.get("spec") or {}).get("metadataOptions") or {}
    names = {
        "httpEndpoint": "HttpEndpoint",
        "httpProtocolIPv6": "HttpProtocolIpv6",
        "httpPutResponseHopLimit": "HttpPutResponseHopLimit",
        "httpTokens": "HttpTokens",
    }
    out = dict(DEFAULT_METADATA_OPTIONS)
    out.update({names[k]: v for k, v in spec.items() if k in names and v is not None})
    return out


def template_data(
    nodeclass: Mapping[str, Any],
    *,
    image_id: str,
    user_data: str,
    tags: Mapping[str, str],
    placement: Mapping[str, Any] | None = None,
    efa_count: int = 0,
    ipv6: bool = False,
) -> JSON:
    """``LaunchTemplateData`` for one group (``user_data`` is the plain text; it is base64-encoded here).

    The security groups go on the network interfaces (:func:`karpy.aws.networkinterfaces.network_interfaces`,
    Karpenter names no template-level ``SecurityGroupIds`` since it always describes the interfaces);
    ``placement``: the placement group fields (:func:`karpy.aws.placementgroups.launch_placement`) beside
    Karpenter's ``Tenancy: default``; ``efa_count`` / ``ipv6``: see ``network_interfaces``."""
    status = nodeclass.get("status") or {}
    spec = nodeclass.get("spec") or {}
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    groups = [str(g["id"]) for g in status.get("securityGroups") or []]
    data: JSON = {
        "ImageId": image_id,
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "IamInstanceProfile": {"Name": str(status.get("instanceProfile") or "")},
        "NetworkInterfaces": network_interfaces(spec, groups, efa_count=efa_count, ipv6=ipv6),
        "Placement": {"Tenancy": "default", **(placement or {})},
        "BlockDeviceMappings": block_device_mappings(nodeclass),
        "MetadataOptions": metadata_options(nodeclass),
        "Monitoring": {"Enabled": bool(spec.get("detailedMonitoring"))},
        "TagSpecifications": [{"ResourceType": "network-interface", "Tags": tag_list}],
    }
    return data


def node_labels(request: LaunchRequest, capacity_type: str, family: str = amifamily.AL2023) -> dict[str, str]:
    """kubelet's node labels: the NodeClaim's labels + capacity type + do-not-sync-taints for every family but
    Custom (Karpenter ``InjectDoNotSyncTaintsLabel``, ``pkg/providers/launchtemplate/launchtemplate.go``)."""
    labels = {**request.labels, wk.LABEL_CAPACITY_TYPE: capacity_type}
    if family != amifamily.CUSTOM:
        labels[wk.LABEL_DO_NOT_SYNC_TAINTS] = "true"
    return labels


def template_name(cluster_name: str, data: Mapping[str, Any]) -> str:
    """``karpenter.k8s.aws/<hash>`` of the cluster and the template data (Karpenter's naming scheme)."""
    return NAME_PREFIX + stable_hash({"cluster": cluster_name, "data": data})


class LaunchTemplateProvider:
    """Ensures launch templates exist; remembers ensured names for :data:`karpy.aws.cache.LAUNCH_TEMPLATES`.

    ``cluster_endpoint``/``cluster_ca_bundle``/``cluster_cidr``/``cluster_dns`` go into every nodeadm NodeConfig
    (Karpenter's launch-template provider holds the same cluster facts). ``reserved_capacity`` (the
    ``ReservedCapacity`` gate) adds the ``CapacityReservationSpecification`` of Karpenter's targeted launch mode
    (:func:`karpy.aws.capacityreservations.launch_template_fields`).
    """

    def __init__(
        self,
        ec2: Any,
        cluster_name: str,
        clock: Timer = time.monotonic,
        *,
        cluster_endpoint: str = "",
        cluster_ca_bundle: str = "",
        cluster_cidr: str = DEFAULT_SERVICE_CIDR,
        cluster_dns: Sequence[str] = DEFAULT_CLUSTER_DNS,
        reserved_capacity: bool = False,
    ) -> None:
        self.ec2 = ec2
        self.reserved_capacity = reserved_capacity
        self.cluster_name = cluster_name
        self.clock = clock
        self.cluster_endpoint = cluster_endpoint
        self.cluster_ca_bundle = cluster_ca_bundle
        self.cluster_cidr = cluster_cidr
        self.cluster_dns = tuple(cluster_dns)
        self._ensured = ttl_cache(LAUNCH_TEMPLATES, clock)
        # The describe/create of a name in flight: concurrent launches of one NodeClass share it instead of each
        # sending DescribeLaunchTemplates (and, on a cold cache, CreateLaunchTemplate that N-1 of them lose).
        self._inflight: dict[str, asyncio.Task[None]] = {}
        # Rendered user data by its inputs: a launch renders one per candidate instance type (up to 60) and the
        # types of a batch share a handful of kubelet resource sets, so most renders (YAML, MIME) are repeats.
        self._user_data: LRUCache[str, str] = LRUCache(USER_DATA_CACHE)
        self.renders = 0  # user data rendered (cache misses), for tests and the profile
        self.started = clock()
        self.last_used: dict[str, float] = {}

    def invalidate(self, name: str) -> None:
        """Forget ``name`` (CreateFleet said it does not exist)."""
        self._ensured.pop(name, None)

    async def ensure_for(
        self,
        request: LaunchRequest,
        it: InstanceType,
        image_id: str,
        capacity_type: str,
        tags: Mapping[str, str],
        placement: Mapping[str, Any] | None = None,
        reservation: Offering | None = None,
    ) -> str:
        """The launch template for launching ``it`` with ``image_id`` for ``request``: the user data of the
        EC2NodeClass's AMI family (:mod:`karpy.aws.amifamily`) with the type's kubelet resources, the NodeClaim's
        labels (+ capacity type and do-not-sync-taints) and taints, the NodeClass's ``userData`` merged in as
        Karpenter merges it; the family's block devices; the NodeClass's network interfaces and ``placement``
        (the placement group, :func:`template_data`); created (tagged with ``tags``) when missing.

        karpy passes the kubeReserved/systemReserved/evictionHard it predicted for the type (Karpenter passes
        only those the EC2NodeClass sets and lets the AMI compute its defaults), so the node's allocatable is
        the one karpy scheduled against. ``reservation``: the reserved offering a ``reserved`` launch targets (one
        template per reservation).

        Raises:
            botocore ClientError: EC2 refused.
            ValueError: the family cannot render the NodeClass's ``userData`` (MIME or TOML that does not
                parse).
        """
        spec = request.nodeclass.get("spec") or {}
        family = amifamily.family_of(spec)
        reserved = kubelet_resources(it.capacity, request.kubelet)
        user_data = self.user_data(family, spec, request, capacity_type, reserved)
        data = template_data(
            request.nodeclass,
            image_id=image_id,
            user_data=user_data,
            tags=tags,
            placement=placement,
            ipv6=any(":" in ip for ip in self.cluster_dns[:1]),
        )
        if self.reserved_capacity:
            data.update(launch_template_fields(reservation))
        return await self.ensure(data, tags)

    def user_data(
        self,
        family: str,
        spec: Mapping[str, Any],
        request: LaunchRequest,
        capacity_type: str,
        reserved: KubeletResources,
    ) -> str:
        """The user data (text) of one launch of ``family`` (see :meth:`ensure_for`); the same inputs give the
        same text, so it is rendered once per distinct inputs (a ``cachetools.LRUCache`` of ``USER_DATA_CACHE``
        renders keyed by the :func:`~karpy.apis.hashing.stable_hash` of the inputs; listed in
        :mod:`karpy.aws.cache`)."""
        labels = node_labels(request, capacity_type, family)
        key = stable_hash(
            [
                family,
                spec,
                labels,
                request.taints,
                request.kubelet,
                attrs.asdict(reserved),
                self.cluster_endpoint,
                self.cluster_ca_bundle,
                self.cluster_cidr,
                self.cluster_dns,
            ]
        )
        cached = self._user_data.get(key)
        if cached is None:
            cached = self._user_data[key] = self._render_user_data(family, spec, request, labels, reserved)
        return cached

    def _render_user_data(
        self,
        family: str,
        spec: Mapping[str, Any],
        request: LaunchRequest,
        labels: Mapping[str, str],
        reserved: KubeletResources,
    ) -> str:
        self.renders += 1
        data = NodeAdmInput(
            cluster_name=self.cluster_name,
            endpoint=self.cluster_endpoint,
            ca_bundle=self.cluster_ca_bundle,
            max_pods=reserved.max_pods,
            kube_reserved=format_reserved(reserved.kube_reserved),
            system_reserved=format_reserved(reserved.system_reserved),
            eviction_hard=reserved.eviction_hard,
            labels=dict(labels),
            taints=request.taints,
            kubelet=request.kubelet,
            cidr=self.cluster_cidr,
            cluster_dns=self.cluster_dns,
            custom_user_data=str(spec.get("userData") or ""),
            instance_store_policy=spec.get("instanceStorePolicy"),
        )
        options = attrs.evolve(bootstrap_options(data), ami_version=amifamily.ami_version(spec))
        return amifamily.user_data(family, options)

    async def ensure(self, data: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """The name of a launch template holding ``data``, created (tagged with ``tags``) when missing.

        Concurrent callers for one name share a single DescribeLaunchTemplates (+ CreateLaunchTemplate) in
        flight; its failure is raised to every one of them and the next call tries again.

        Raises:
            botocore ClientError: EC2 refused (other than not-found on describe, already-exists on create).
        """
        name = template_name(self.cluster_name, data)
        self.last_used[name] = self.clock()
        if name in self._ensured:
            return name
        task = self._inflight.get(name)
        if task is None:
            task = asyncio.create_task(self._describe_or_create(name, data, tags))
            self._inflight[name] = task
            task.add_done_callback(lambda done: self._settle(name, done))
        # shield: a caller cancelled while waiting does not cancel the operation the others wait on.
        await asyncio.shield(task)
        return name

    def _settle(self, name: str, task: asyncio.Task[None]) -> None:
        if self._inflight.get(name) is task:
            del self._inflight[name]
        if not task.cancelled():
            task.exception()  # retrieved here too, so a failure every waiter left behind is not logged as lost

    async def _describe_or_create(self, name: str, data: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        try:
            await self.ec2.describe_launch_templates(LaunchTemplateNames=[name])
        except Exception as err:
            if not is_not_found(err):
                raise
            await self._create(name, data, tags)
        self._ensured[name] = True

    async def _create(self, name: str, data: Mapping[str, Any], tags: Mapping[str, str]) -> None:
        tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
        try:
            await self.ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=dict(data),
                TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list}],
            )
            log.info("created launch template", launch_template=name, image_id=data.get("ImageId"))
        except Exception as err:
            if not is_already_exists(err):
                raise

    async def list_owned(self) -> list[OwnedTemplate]:
        """Every launch template tagged ``kubernetes.io/cluster/<cluster>=owned`` with karpy's name prefix."""
        filters = [{"Name": f"tag:{wk.cluster_tag(self.cluster_name)}", "Values": ["owned"]}]
        out: list[OwnedTemplate] = []
        paginator = self.ec2.get_paginator("describe_launch_templates")
        async for page in paginator.paginate(Filters=filters):
            for lt in page.get("LaunchTemplates") or []:
                name = str(lt.get("LaunchTemplateName") or "")
                if not name.startswith(NAME_PREFIX):
                    continue
                created = lt.get("CreateTime")
                out.append(
                    OwnedTemplate(
                        template_id=str(lt["LaunchTemplateId"]),
                        name=name,
                        created=created if isinstance(created, datetime) else None,
                        tags={str(t["Key"]): str(t["Value"]) for t in lt.get("Tags") or []},
                    )
                )
        return out

    async def delete(self, template: OwnedTemplate) -> bool:
        """Delete one template (by id); False when it was already gone."""
        self.invalidate(template.name)
        self.last_used.pop(template.name, None)
        try:
            await self.ec2.delete_launch_template(LaunchTemplateId=template.template_id)
        except Exception as err:
            if is_not_found(err):
                return False
            raise
        log.info("deleted launch template", launch_template=template.name)
        return True

    async def delete_all(self, extra_filters: Sequence[Mapping[str, Any]] = ()) -> int:
        """Delete every launch template tagged for this cluster (and matching ``extra_filters``); returns count."""
        filters = [{"Name": f"tag:{wk.cluster_tag(self.cluster_name)}", "Values": ["owned"]}, *extra_filters]
        response = await self.ec2.describe_launch_templates(Filters=filters)
        count = 0
        for lt in response.get("LaunchTemplates") or []:
            await self.ec2.delete_launch_template(LaunchTemplateId=lt["LaunchTemplateId"])
            self._ensured.pop(lt["LaunchTemplateName"], None)
            count += 1
        return count


@attrs.frozen(slots=True)
class OwnedTemplate:
    """A launch template of this cluster: id, name, creation time (aware UTC, None if unknown) and tags."""

    template_id: str
    name: str
    created: datetime | None
    tags: Mapping[str, str]


def unused_templates(
    templates: Sequence[OwnedTemplate],
    *,
    nodeclasses: Collection[str],
    last_used: Mapping[str, float],
    started: float,
    now: float,
    ttl: float = LAUNCH_TEMPLATE_UNUSED.seconds,
) -> list[OwnedTemplate]:
    """The templates no launch needs (pure): tagged for an EC2NodeClass not in ``nodeclasses`` (NodeClass
    deleted), or not ensured for ``ttl`` seconds (``last_used``: name → clock time; a name never used by this
    process counts from ``started``). Times are the provider clock's seconds."""
    out = []
    for template in templates:
        owner = template.tags.get(wk.TAG_NODECLASS)
        orphaned = owner is not None and owner not in nodeclasses
        if orphaned or now - last_used.get(template.name, started) >= ttl:
            out.append(template)
    return out
