"""The node agent: kubelet and the AWS cloud controller manager for every EC2 instance launched in moto.

Every ``interval`` seconds it lists the instances tagged ``kubernetes.io/cluster/<cluster>`` (any value) and the
Nodes, then:

- for each pending/running instance without a Node of its providerID, reads the instance's user data (the
  ``userData`` attribute; if empty, the launch template version it was launched from), of any AMI family
  (:func:`e2e.cluster.kubelet.parse_user_data`), and registers the Node kubelet would
  (:func:`e2e.cluster.kubelet.build_node`). KWOK (``--manage-all-nodes``) then keeps it Ready and runs the pods
  bound to it. An instance whose user data the agent cannot read (a custom AMI's own script) gets no Node
  (logged once).
- for each Node whose ``aws:///<zone>/<id>`` instance is shutting-down, terminated or unknown to EC2, deletes
  the Node, as the cloud node lifecycle controller does (a finalizer on it, e.g. karpy's, holds the deletion).

A "bad AMI" for disruption tests: an instance launched from an image tagged ``karpy-e2e/never-ready=true`` is
never registered (its kubelet never joins), which is what a broken AMI does to a replacement node.

Node health conditions, for node repair tests: the agent also plays the EKS node monitoring agent. An instance
tagged ``karpy-e2e/condition/<Type>`` (e.g. ``karpy-e2e/condition/NetworkingReady``) with the value
``status=False,reason=IPAMDNotRunning[,message=...][,since=<RFC 3339>]`` gets that condition on its Node's status
(a strategic merge patch by condition type, re-applied whenever the Node lost or changed it), with
``lastTransitionTime`` = ``since`` (default: when the agent first saw the tag); removing the tag leaves the
condition as it is (set ``status=True`` to heal). :func:`condition_tag` builds the tag. Conditions KWOK owns
(``Ready``, the pressure conditions) are not reported: KWOK's ``node-initialize`` stage resets a non-True
``Ready`` at once.

Extended resources, for NodeOverlay tests: the agent also plays a device plugin (and hugepages set up at boot). An
instance tagged ``karpy-e2e/resource/<name>`` (e.g. ``karpy-e2e/resource/example.com/device`` = ``4``, or
``karpy-e2e/resource/hugepages-2Mi`` = ``1Gi``; an EC2NodeClass ``tags`` entry puts it on every instance) registers
with that resource in its capacity and allocatable.

Restart-safe: a Node already present for a providerID is left alone. Errors are logged and the loop goes on.

Fast at scale (hundreds of instances launched at once, as a provisioner does for a big batch): the instances a
pass finds without a Node are registered concurrently (up to ``concurrency`` at a time, kubelets boot in
parallel); an instance's launch template is read from its ``aws:ec2launchtemplate:id/version`` tags (EC2 puts them
on a fleet's instances; :func:`e2e.cluster.motofast.patch_moto_fleet_instance_tags` makes moto do so too), and a
numbered launch template version is read once (versions are immutable).
moto runs in this process, so every EC2 call the agent saves is CPU moto's CreateFleet gets back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from e2e.cluster import kubelet
from e2e.cluster.motofast import LAUNCH_TEMPLATE_ID_TAG, LAUNCH_TEMPLATE_VERSION_TAG
from karpy.apis.labels import TAG_NODECLAIM
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

log = logging.getLogger("e2e.cluster.nodeagent")
LIVE_STATES = frozenset({"pending", "running"})
GONE_STATES = frozenset({"shutting-down", "terminated"})
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
NEVER_READY_TAG = "karpy-e2e/never-ready"
MAX_ATTEMPTS = 20  # registration attempts per instance (10 s at the default interval) before it is ignored
CONCURRENCY = 32  # registrations in flight at once
CONDITION_TAG_PREFIX = "karpy-e2e/condition/"
KWOK_CONDITIONS = frozenset({"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def rfc3339(at: datetime) -> str:
    """``at`` as Kubernetes writes times (UTC, whole seconds)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_tag(
    type_: str, status: str, reason: str = "KarpyE2E", *, message: str = "", since: datetime | None = None
) -> dict[str, str]:
    """The EC2 tag (``{"Key": …, "Value": …}``) asking the agent to report Node condition ``type_`` (see the
    module docstring); ``since`` backdates its ``lastTransitionTime``."""
    parts = [f"status={status}", f"reason={reason}"]
    if message:
        parts.append(f"message={message}")
    if since is not None:
        parts.append(f"since={rfc3339(since)}")
    return {"Key": CONDITION_TAG_PREFIX + type_, "Value": ",".join(parts)}


def requested_conditions(tags: Mapping[str, str], first_seen: Mapping[str, datetime]) -> list[dict[str, str]]:
    """The Node conditions an instance's ``karpy-e2e/condition/<Type>`` tags ask for, as Node status JSON;
    ``first_seen`` gives, per type, the ``lastTransitionTime`` of a tag without ``since``. Tags for conditions KWOK
    owns, or without a valid ``status``, are skipped."""
    out = []
    for key, value in sorted(tags.items()):
        if not key.startswith(CONDITION_TAG_PREFIX):
            continue
        type_ = key[len(CONDITION_TAG_PREFIX) :]
        fields: dict[str, str] = {}
        for part in value.split(","):
            name, sep, text = part.partition("=")
            if sep:
                fields[name.strip()] = text.strip()
        status = fields.get("status", "")
        if not type_ or type_ in KWOK_CONDITIONS or status not in ("True", "False", "Unknown"):
            log.warning("ignoring condition tag %s=%s", key, value)
            continue
        since = fields.get("since") or rfc3339(first_seen.get(type_, datetime.now(UTC)))
        out.append(
            {
                "type": type_,
                "status": status,
                "reason": fields.get("reason", "KarpyE2E"),
                "message": fields.get("message", ""),
                "lastTransitionTime": since,
            }
        )
    return out


def missing_conditions(node: Mapping[str, Any], wanted: list[dict[str, str]]) -> list[dict[str, str]]:
    """The wanted conditions the Node does not have as they are (type, status, reason, message, transition)."""
    have = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
    keys = ("status", "reason", "message", "lastTransitionTime")
    return [w for w in wanted if any((have.get(w["type"]) or {}).get(k, "") != w[k] for k in keys)]


RESOURCE_TAG_PREFIX = "karpy-e2e/resource/"


def advertised_resources(tags: list[Mapping[str, str]]) -> dict[str, str]:
    """The extended resources an instance's ``karpy-e2e/resource/<name>`` tags ask the Node to advertise."""
    return {
        t["Key"][len(RESOURCE_TAG_PREFIX) :]: t["Value"]
        for t in tags
        if t.get("Key", "").startswith(RESOURCE_TAG_PREFIX) and len(t["Key"]) > len(RESOURCE_TAG_PREFIX)
    }


def instance_of_provider_id(provider_id: str) -> str | None:
    """The instance id in ``aws:///<zone>/<instance-id>`` (None for another provider's id)."""
    if not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


TEMPLATE_TAG_GRACE = 5.0  # seconds after launch a fleet's instance may still lack its launch template tags


class TemplateNotTaggedYet(RuntimeError):
    """A just-launched NodeClaim instance has no launch template tags yet (the registration is retried on the
    next pass)."""


def _just_launched(inst: Mapping[str, Any], now: datetime | None = None) -> bool:
    """The instance launched less than ``TEMPLATE_TAG_GRACE`` seconds ago."""
    launched = inst.get("LaunchTime")
    if not isinstance(launched, datetime):
        return False
    return ((now or datetime.now(UTC)) - launched).total_seconds() < TEMPLATE_TAG_GRACE


class NodeAgent:
    """Registers and deletes Nodes for one cluster's EC2 instances; see the module docstring.

    ``ec2`` is a boto3 EC2 client (calls run in a worker thread); ``kube`` an admin :class:`KubeClient`.
    """

    def __init__(
        self,
        kube: KubeClient,
        ec2: Any,
        cluster_name: str,
        region: str,
        *,
        interval: float = 0.5,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self.kube = kube
        self.ec2 = ec2
        self.cluster_name = cluster_name
        self.region = region
        self.interval = interval
        self.concurrency = max(1, concurrency)
        self._lock = threading.Lock()  # the EC2 reads run in worker threads, several at once
        self._template_versions: dict[tuple[str, str], dict[str, Any] | None] = {}  # (template, number) -> data
        self._types: dict[str, Mapping[str, Any]] = {}
        self._zone_ids: dict[str, str] = {}
        self._failures: dict[str, int] = {}
        self._ignored: set[str] = set()  # instances without user data the agent reads, logged once
        self.registered: dict[str, str] = {}  # instance id -> node name, for the log and tests
        self.deleted: set[str] = set()
        self._never_ready_images: dict[str, bool] = {}
        self._condition_first_seen: dict[str, dict[str, datetime]] = {}  # instance id -> condition type -> when
        self.reported: dict[str, list[str]] = {}  # node name -> condition types patched, for the log and tests

    @property
    def ignored(self) -> frozenset[str]:
        """Instance ids this agent decided never to register (no or unreadable user data, a never-ready AMI,
        a name taken by another Node, or too many failed attempts)."""
        return frozenset(self._ignored)

    async def run(self) -> None:
        """Reconcile forever (until cancelled)."""
        log.info("node agent started for cluster %s", self.cluster_name)
        while True:
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node agent pass failed; retrying")
            await asyncio.sleep(self.interval)

    async def sync_once(self) -> None:
        """One pass: register Nodes for new instances, delete Nodes of terminated ones."""
        instances = await asyncio.to_thread(self._describe_live_instances)
        nodes, _ = await self.kube.list(r.NODES)
        by_instance: dict[str, dict[str, Any]] = {}
        for node in nodes:
            iid = instance_of_provider_id((node.get("spec") or {}).get("providerID") or "")
            if iid:
                by_instance[iid] = node
        live = {i["InstanceId"] for i in instances}
        new = [i for i in instances if i["InstanceId"] not in by_instance and i["InstanceId"] not in self._ignored]
        limit = asyncio.Semaphore(self.concurrency)
        await asyncio.gather(*(self._register_new(inst, limit) for inst in new))
        for inst in instances:
            node = by_instance.get(inst["InstanceId"])
            if node is not None and not node["metadata"].get("deletionTimestamp"):
                await self._report_conditions(inst, node)
        # Nodes whose instance is not (or no longer) a live cluster instance: ask EC2 about just those.
        suspects = [
            iid
            for iid, node in by_instance.items()
            if iid not in live and not node["metadata"].get("deletionTimestamp")
        ]
        if suspects:
            states = await asyncio.to_thread(self._states_of, suspects)
            gone = [iid for iid in suspects if states.get(iid) is None or states.get(iid) in GONE_STATES]
            await asyncio.gather(*(self._delete(by_instance[iid], iid, states.get(iid) or "gone") for iid in gone))

    async def _register_new(self, inst: Mapping[str, Any], limit: asyncio.Semaphore) -> None:
        """Register a Node for an instance without one (at most ``limit`` at a time); a failure is retried on
        the next pass, up to ``MAX_ATTEMPTS``."""
        iid = inst["InstanceId"]
        async with limit:
            if await asyncio.to_thread(self._never_ready, str(inst.get("ImageId") or "")):
                log.info("instance %s runs a never-ready AMI %s; no node registered", iid, inst.get("ImageId"))
                self._ignored.add(iid)
                return
            try:
                await self._register(inst)
            except TemplateNotTaggedYet:
                log.info("instance %s: its launch template tags are not there yet; registering on the next pass", iid)
            except Exception:
                self._failures[iid] = self._failures.get(iid, 0) + 1
                if self._failures[iid] >= MAX_ATTEMPTS:
                    log.exception("registering a node for %s failed %d times; giving up", iid, MAX_ATTEMPTS)
                    self._ignored.add(iid)
                else:
                    log.warning("registering a node for %s failed; will retry", iid, exc_info=True)

    # -- EC2 -------------------------------------------------------------------------------------

    def _describe_live_instances(self) -> list[dict[str, Any]]:
        """Pending and running instances tagged ``kubernetes.io/cluster/<cluster>`` (any value)."""
        out: list[dict[str, Any]] = []
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag-key", "Values": [CLUSTER_TAG_PREFIX + self.cluster_name]},
                {"Name": "instance-state-name", "Values": sorted(LIVE_STATES)},
            ]
        )
        for page in pages:
            for reservation in page.get("Reservations") or []:
                out.extend(reservation.get("Instances") or [])
        return out

    def _states_of(self, instance_ids: list[str]) -> dict[str, str]:
        """The state of each instance EC2 knows (an unknown id is absent from the answer)."""
        from botocore.exceptions import ClientError

        try:
            pages = self.ec2.describe_instances(InstanceIds=instance_ids)
        except ClientError as err:
            if "NotFound" not in str(err.response.get("Error", {}).get("Code", "")):
                raise
            if len(instance_ids) == 1:
                return {}
            out: dict[str, str] = {}
            for iid in instance_ids:  # one unknown id fails the whole call: ask one by one
                out.update(self._states_of([iid]))
            return out
        return {
            inst["InstanceId"]: str(inst["State"]["Name"])
            for reservation in pages.get("Reservations") or []
            for inst in reservation.get("Instances") or []
        }

    def _never_ready(self, image_id: str) -> bool:
        """The image carries ``karpy-e2e/never-ready=true`` (cached per image)."""
        if not image_id:
            return False
        if image_id not in self._never_ready_images:
            from botocore.exceptions import ClientError

            try:
                images = self.ec2.describe_images(ImageIds=[image_id]).get("Images") or []
            except ClientError:
                return False  # unknown image: register as before
            tags = {t["Key"]: t["Value"] for image in images for t in image.get("Tags") or []}
            self._never_ready_images[image_id] = tags.get(NEVER_READY_TAG) == "true"
        return self._never_ready_images[image_id]

    def _instance_type(self, name: str) -> Mapping[str, Any]:
        if name not in self._types:
            self._types[name] = self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0]
        return self._types[name]

    def _zone_id(self, zone: str) -> str | None:
        with self._lock:  # filled once; a concurrent reader must not see it half filled
            if not self._zone_ids:
                for z in self.ec2.describe_availability_zones()["AvailabilityZones"]:
                    if z.get("ZoneId"):
                        self._zone_ids[z["ZoneName"]] = z["ZoneId"]
            return self._zone_ids.get(zone)

    def _launch_template_data(self, inst: Mapping[str, Any]) -> dict[str, Any] | None:
        """The LaunchTemplateData the instance was launched from, if it can be found (from its
        ``aws:ec2launchtemplate:id/version`` tags, which EC2 puts on RunInstances' and fleets' instances).

        Raises:
            TemplateNotTaggedYet: a just-launched instance of a NodeClaim (karpy's ``karpenter.sh/nodeclaim`` tag)
                without the template tags yet.
        """
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
        spec: dict[str, str] | None = None
        if LAUNCH_TEMPLATE_ID_TAG in tags:
            spec = {"LaunchTemplateId": tags[LAUNCH_TEMPLATE_ID_TAG]}
            if LAUNCH_TEMPLATE_VERSION_TAG in tags:
                spec["Version"] = tags[LAUNCH_TEMPLATE_VERSION_TAG]
        elif TAG_NODECLAIM in tags and _just_launched(inst):
            # moto's threaded server can list a fleet's instance (already carrying the tags karpy asked for) a
            # moment before the fleet patch tags it with its template: wait for the next pass rather than register
            # without the template's volume size. One without karpy's tag (RunInstances, no template) is decided now.
            raise TemplateNotTaggedYet(inst["InstanceId"])
        if not spec:
            return None
        kwargs: dict[str, Any] = {k: v for k, v in spec.items() if k in ("LaunchTemplateId", "LaunchTemplateName")}
        version = str(spec.get("Version") or "$Default")
        kwargs["Versions"] = [version]
        # A numbered version never changes: read it once. $Default/$Latest can move, so they are read every time.
        key = (str(kwargs.get("LaunchTemplateId") or kwargs.get("LaunchTemplateName") or ""), version)
        if version.isdigit() and key in self._template_versions:
            return self._template_versions[key]
        versions = self.ec2.describe_launch_template_versions(**kwargs)["LaunchTemplateVersions"]
        data = dict(versions[0]["LaunchTemplateData"]) if versions else None
        if version.isdigit():
            self._template_versions[key] = data
        return data

    def _user_data(self, inst: Mapping[str, Any], template: Mapping[str, Any] | None) -> bytes:
        attr = self.ec2.describe_instance_attribute(InstanceId=inst["InstanceId"], Attribute="userData")
        value = (attr.get("UserData") or {}).get("Value")
        if not value and template:
            value = template.get("UserData")
        return kubelet.decode_user_data(value)

    def _root_volume_bytes(
        self, inst: Mapping[str, Any], template: Mapping[str, Any] | None, family: str = "AL2023"
    ) -> int:
        """The size of the filesystem kubelet reports as ephemeral-storage capacity.

        The launch template's mapping of that device wins (moto's CreateFleet gives instances a default 8 GiB
        volume instead of the template's), then the attached root volume, then Karpenter's 20Gi default. The
        device is the root one, except on Bottlerocket, whose pods' storage is its data volume ``/dev/xvdb``
        (Karpenter's ``EphemeralBlockDevice``).
        """
        root = "/dev/xvdb" if family == "Bottlerocket" else inst.get("RootDeviceName")
        mappings = [m for m in (template or {}).get("BlockDeviceMappings") or [] if "Ebs" in m]
        chosen = next((m for m in mappings if m.get("DeviceName") == root), mappings[0] if len(mappings) == 1 else None)
        if chosen and chosen["Ebs"].get("VolumeSize"):
            return int(chosen["Ebs"]["VolumeSize"]) * 2**30
        for mapping in inst.get("BlockDeviceMappings") or []:
            if mapping.get("DeviceName") == root and (mapping.get("Ebs") or {}).get("VolumeId"):
                volumes = self.ec2.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"]
                if volumes:
                    return int(volumes[0]["Size"]) * 2**30
        return kubelet.DEFAULT_STORAGE_BYTES

    def _node_for(self, inst: Mapping[str, Any]) -> dict[str, Any] | None:
        """The Node kubelet would register for ``inst`` (None: user data the agent cannot read, e.g. a custom
        AMI's own script)."""
        from botocore.exceptions import ClientError

        try:
            template = self._launch_template_data(inst)
        except ClientError as err:  # e.g. the template was deleted since; the instance attributes still serve
            log.info("instance %s: launch template not readable (%s)", inst["InstanceId"], err)
            template = None
        config = kubelet.parse_user_data(self._user_data(inst, template))
        if config is None:
            return None
        zone = inst["Placement"]["AvailabilityZone"]
        instance = kubelet.Instance(
            instance_id=inst["InstanceId"],
            instance_type=inst["InstanceType"],
            zone=zone,
            region=self.region,
            private_dns_name=inst.get("PrivateDnsName") or f"{inst['InstanceId']}.ec2.internal",
            private_ip=inst.get("PrivateIpAddress") or "",
            type_info=self._instance_type(inst["InstanceType"]),
            zone_id=self._zone_id(zone),
            storage_bytes=self._root_volume_bytes(inst, template, config.family),
        )
        node = kubelet.build_node(instance, config)
        extra = advertised_resources(inst.get("Tags") or [])
        for field in ("capacity", "allocatable"):  # as a device plugin registers them
            node["status"][field].update(extra)
        return node

    # -- Kubernetes ------------------------------------------------------------------------------

    async def _register(self, inst: Mapping[str, Any]) -> None:
        iid = inst["InstanceId"]
        try:
            node = await asyncio.to_thread(self._node_for, inst)
        except kubelet.UserDataError as err:
            log.warning("instance %s: invalid user data (%s); no node registered", iid, err)
            self._ignored.add(iid)
            return
        if node is None:
            log.info("instance %s has no user data the agent reads; no node registered", iid)
            self._ignored.add(iid)
            return
        name = node["metadata"]["name"]
        try:
            await self.kube.create(r.NODES, node)
        except ApiError as err:
            if err.status != 409:
                raise
            existing = await self.kube.get(r.NODES, name)
            log.warning(
                "node %s exists with providerID %s; not registering %s",
                name,
                (existing.get("spec") or {}).get("providerID"),
                iid,
            )
            self._ignored.add(iid)
            return
        self.registered[iid] = name
        log.info(
            "registered node %s for %s (%s, %s) labels=%d taints=%s",
            name,
            iid,
            inst["InstanceType"],
            inst["Placement"]["AvailabilityZone"],
            len(node["metadata"]["labels"]),
            [t["key"] for t in node["spec"].get("taints") or []],
        )

    async def _report_conditions(self, inst: Mapping[str, Any], node: Mapping[str, Any]) -> None:
        """Patch the conditions the instance's tags ask for onto its Node (only those it lacks as asked)."""
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
        seen = self._condition_first_seen.setdefault(inst["InstanceId"], {})
        for key in tags:
            if key.startswith(CONDITION_TAG_PREFIX):
                seen.setdefault(key[len(CONDITION_TAG_PREFIX) :], datetime.now(UTC))
        patch = missing_conditions(node, requested_conditions(tags, seen))
        if not patch:
            return
        name = node["metadata"]["name"]
        try:
            await self.kube.request(
                "PATCH",
                r.NODES.path(None, name, "status"),
                body={"status": {"conditions": patch}},
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except ApiError as err:
            log.warning("reporting conditions on node %s failed: %s", name, err)
            return
        self.reported.setdefault(name, []).extend(c["type"] for c in patch)
        log.info("node %s reports %s", name, ", ".join(f"{c['type']}={c['status']}/{c['reason']}" for c in patch))

    async def _delete(self, node: Mapping[str, Any], instance_id: str, state: str) -> None:
        name = node["metadata"]["name"]
        try:
            await self.kube.delete(r.NODES, name)
        except ApiError as err:
            if not err.not_found:
                log.warning("deleting node %s (instance %s %s) failed: %s", name, instance_id, state, err)
            return
        self.deleted.add(instance_id)
        log.info("deleted node %s: instance %s is %s", name, instance_id, state)
