"""EC2NodeClass resolution: subnets, security groups, AMIs and the instance profile (Karpenter AWS
``pkg/controllers/nodeclass/{subnet,securitygroup,ami,instanceprofile}.go`` and the matching providers).

:func:`resolve` turns ``spec`` selector terms into the v1 ``status`` shape and one condition per part
(SubnetsReady, SecurityGroupsReady, AMIsReady, InstanceProfileReady). Selector terms are ORed; fields within
a term are ANDed; a tag value ``"*"`` matches any value of that key. AWS errors never raise out of
:func:`resolve`: a selector that matched nothing is a False condition (``SubnetsNotFound``…), while a read that
*failed* (connection refused, throttling, a 5xx, access denied) is reported in ``failed`` with its part's
status left out, so the status controller keeps the last known value (Karpenter's reconcilers return the error
and leave ``status`` as it was: a failed DescribeSubnets is never "no subnets matched").

AMI aliases (``al2023@latest``, ``al2023@vYYYYMMDD``) are read from the public EKS SSM parameters
``/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<x86_64|arm64>/<standard|nvidia|neuron>/…/image_id``.
An instance profile named in ``spec.instanceProfile`` is used as is; with ``spec.role`` karpy creates (once)
and tags a profile named ``<cluster>_<hash(region, nodeclass)>`` holding that role (Karpenter's naming).
Deliberately not done: capacity reservations, AMI deprecation checks, instance-profile garbage collection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.hashing import stable_hash
from karpy.aws.errors import error_code, is_already_exists, is_not_found

log = structlog.get_logger("karpy.aws.nodeclass")
JSON = dict[str, Any]
EKS_AMI_ROOT: Final = "/aws/service/eks/optimized-ami"
_ARCH: Final = {"x86_64": "amd64", "arm64": "arm64"}


@attrs.frozen
class NodeClassResolution:
    """``status``: subnets/securityGroups/amis/instanceProfile (Karpenter v1 shape); ``conditions``: dicts
    with type, status ("True"/"False"), reason and message."""

    status: JSON
    conditions: list[JSON]
    # Condition type → error message, for the parts whose AWS read failed. Their status key is absent from
    # ``status`` and their condition (False, ``…ResolutionFailed``) applies only when nothing is known yet.
    failed: dict[str, str] = attrs.field(factory=dict)

    @property
    def ready(self) -> bool:
        """True when every part resolved."""
        return not self.failed and all(c["status"] == "True" for c in self.conditions)


def _condition(type_: str, ok: bool, reason: str, message: str = "") -> JSON:
    return {"type": type_, "status": "True" if ok else "False", "reason": type_ if ok else reason, "message": message}


def tag_filters(tags: Mapping[str, str]) -> list[JSON]:
    """EC2 filters for a ``tags`` selector (``"*"`` → any value of the key)."""
    filters = []
    for key, value in sorted(tags.items()):
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def _tags(resource: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags") or []}


# Subnets ---------------------------------------------------------------------------------------------------


async def resolve_subnets(ec2: Any, terms: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """``status.subnets`` entries ``{id, zone, zoneID}``, most free IPs first (Karpenter's order)."""
    found: dict[str, JSON] = {}
    for term in terms:
        if term.get("id"):
            kwargs: JSON = {"SubnetIds": [term["id"]]}
        else:
            kwargs = {"Filters": tag_filters(term.get("tags") or {})}
        try:
            response = await ec2.describe_subnets(**kwargs)
        except Exception as err:
            if is_not_found(err):
                continue
            raise
        for subnet in response.get("Subnets") or []:
            if subnet.get("State", "available") == "available":
                found[subnet["SubnetId"]] = subnet
    ordered = sorted(found.values(), key=lambda s: (-int(s.get("AvailableIpAddressCount") or 0), s["SubnetId"]))
    return [
        {"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s.get("AvailabilityZoneId", "")} for s in ordered
    ]


# Security groups -------------------------------------------------------------------------------------------


async def resolve_security_groups(ec2: Any, terms: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """``status.securityGroups`` entries ``{id, name}``, sorted by id."""
    found: dict[str, JSON] = {}
    for term in terms:
        if term.get("id"):
            kwargs: JSON = {"GroupIds": [term["id"]]}
        elif term.get("name"):
            kwargs = {"Filters": [{"Name": "group-name", "Values": [term["name"]]}]}
        else:
            kwargs = {"Filters": tag_filters(term.get("tags") or {})}
        try:
            response = await ec2.describe_security_groups(**kwargs)
        except Exception as err:
            if is_not_found(err):
                continue
            raise
        for group in response.get("SecurityGroups") or []:
            found[group["GroupId"]] = group
    return [{"id": g["GroupId"], "name": g.get("GroupName", "")} for _, g in sorted(found.items())]


# AMIs ------------------------------------------------------------------------------------------------------


def alias_parameters(alias: str, k8s_version: str) -> dict[str, tuple[str, str]]:
    """SSM parameter name → (architecture, variant) for an ``al2023@<version>`` alias.

    Raises:
        ValueError: the alias family is not al2023 (the only family karpy bootstraps).
    """
    family, _, version = alias.partition("@")
    if family.lower() != "al2023":
        raise ValueError(f"unsupported AMI alias family {family!r} (only al2023)")
    version = version or "latest"
    out = {}
    for arch in ("x86_64", "arm64"):
        variants = ("standard", "nvidia", "neuron") if arch == "x86_64" else ("standard", "nvidia")
        for variant in variants:
            base = f"{EKS_AMI_ROOT}/{k8s_version}/amazon-linux-2023/{arch}/{variant}"
            if version == "latest":
                name = f"{base}/recommended/image_id"
            else:
                name = f"{base}/amazon-eks-node-al2023-{arch}-{variant}-{k8s_version}-{version}/image_id"
            out[name] = (arch, variant)
    return out


def ami_requirements(arch: str, variant: str) -> list[JSON]:
    """Karpenter's AL2023 AMI requirements: the architecture, and GPU/accelerator presence per variant."""
    reqs: list[JSON] = [{"key": wk.LABEL_ARCH, "operator": "In", "values": [_ARCH.get(arch, arch)]}]
    if variant == "nvidia":
        reqs.append({"key": wk.LABEL_INSTANCE_GPU_MANUFACTURER, "operator": "In", "values": ["nvidia"]})
    elif variant == "neuron":
        reqs.append({"key": wk.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER, "operator": "In", "values": ["aws"]})
    else:
        reqs.append({"key": wk.LABEL_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"})
        reqs.append({"key": wk.LABEL_INSTANCE_ACCELERATOR_COUNT, "operator": "DoesNotExist"})
    return reqs


def _created(image: Mapping[str, Any]) -> datetime:
    """CreationDate as an aware datetime (the oldest possible when missing or malformed)."""
    try:
        created = datetime.fromisoformat(str(image.get("CreationDate", "")).replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return created if created.tzinfo else created.replace(tzinfo=UTC)


async def _describe_images(ec2: Any, **kwargs: Any) -> list[JSON]:
    try:
        response = await ec2.describe_images(**kwargs)
    except Exception as err:
        if is_not_found(err):
            return []
        raise
    return [i for i in response.get("Images") or [] if i.get("State", "available") == "available"]


async def resolve_amis(ec2: Any, ssm: Any, terms: Sequence[Mapping[str, Any]], k8s_version: str) -> list[JSON]:
    """``status.amis`` entries ``{id, name, requirements}``: per requirement set, the newest image wins."""
    candidates: list[tuple[JSON, list[JSON]]] = []
    for term in terms:
        if term.get("alias"):
            params = alias_parameters(str(term["alias"]), k8s_version)
            response = await ssm.get_parameters(Names=list(params))
            ids = {p["Value"]: params[p["Name"]] for p in response.get("Parameters") or []}
            if not ids:
                continue
            for image in await _describe_images(ec2, ImageIds=list(ids)):
                candidates.append((image, ami_requirements(*ids[image["ImageId"]])))
            continue
        kwargs: JSON = {}
        filters: list[JSON] = []
        if term.get("id"):
            kwargs["ImageIds"] = [term["id"]]
        if term.get("name"):
            filters.append({"Name": "name", "Values": [term["name"]]})
        filters += tag_filters(term.get("tags") or {})
        if term.get("owner"):
            kwargs["Owners"] = [term["owner"]]
        elif term.get("name") and not term.get("id"):
            kwargs["Owners"] = ["self", "amazon"]
        if filters:
            kwargs["Filters"] = filters
        for image in await _describe_images(ec2, **kwargs):
            arch = str(image.get("Architecture") or "x86_64")
            candidates.append((image, [{"key": wk.LABEL_ARCH, "operator": "In", "values": [_ARCH.get(arch, arch)]}]))
    newest: dict[str, tuple[JSON, list[JSON]]] = {}
    for image, reqs in candidates:
        key = stable_hash(reqs)
        if key not in newest or _created(image) > _created(newest[key][0]):
            newest[key] = (image, reqs)
    return sorted(
        ({"id": i["ImageId"], "name": i.get("Name", ""), "requirements": r} for i, r in newest.values()),
        key=lambda a: (str(a["name"]), str(a["id"])),
    )


# Instance profile ------------------------------------------------------------------------------------------


def instance_profile_name(cluster_name: str, region: str, nodeclass_name: str) -> str:
    """Karpenter's stable name for the profile it manages: ``<cluster>_<hash(region + nodeclass)>``."""
    return f"{cluster_name}_{stable_hash(region + nodeclass_name)}"[:128]


async def ensure_instance_profile(iam: Any, *, role: str, cluster_name: str, region: str, nodeclass_name: str) -> str:
    """Create (once) the managed instance profile holding ``role``; returns its name.

    Raises:
        botocore ClientError: IAM refused (e.g. the role does not exist).
    """
    name = instance_profile_name(cluster_name, region, nodeclass_name)
    role_name = role.rsplit("/", 1)[-1]
    try:
        profile = (await iam.get_instance_profile(InstanceProfileName=name))["InstanceProfile"]
    except Exception as err:
        if not is_not_found(err):
            raise
        tags = [
            {"Key": wk.cluster_tag(cluster_name), "Value": "owned"},
            {"Key": wk.TAG_EKS_CLUSTER_NAME, "Value": cluster_name},
            {"Key": wk.TAG_NODECLASS, "Value": nodeclass_name},
            {"Key": wk.LABEL_REGION, "Value": region},
        ]
        try:
            profile = (await iam.create_instance_profile(InstanceProfileName=name, Tags=tags))["InstanceProfile"]
        except Exception as create_err:
            if not is_already_exists(create_err):
                raise
            profile = (await iam.get_instance_profile(InstanceProfileName=name))["InstanceProfile"]
    attached = [r["RoleName"] for r in profile.get("Roles") or []]
    if role_name not in attached:
        for other in attached:
            await iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
        await iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
    return name


# All together ----------------------------------------------------------------------------------------------


async def resolve(
    ec2: Any,
    ssm: Any,
    iam: Any,
    nodeclass: Mapping[str, Any],
    *,
    cluster_name: str,
    region: str,
    k8s_version: str,
) -> NodeClassResolution:
    """Resolve every part of ``nodeclass`` (EC2NodeClass JSON); failures are conditions, not exceptions."""
    spec = nodeclass.get("spec") or {}
    name = str((nodeclass.get("metadata") or {}).get("name", ""))
    status: JSON = {}
    conditions: list[JSON] = []
    failed: dict[str, str] = {}

    try:
        status["subnets"] = await resolve_subnets(ec2, spec.get("subnetSelectorTerms") or [])
        ok = bool(status["subnets"])
        conditions.append(
            _condition(
                wk.COND_SUBNETS_READY, ok, "SubnetsNotFound", "" if ok else "SubnetSelector did not match any Subnets"
            )
        )
    except Exception as err:
        _failed(status, conditions, failed, ("subnets", wk.COND_SUBNETS_READY, "SubnetsResolutionFailed"), err)

    try:
        status["securityGroups"] = await resolve_security_groups(ec2, spec.get("securityGroupSelectorTerms") or [])
        ok = bool(status["securityGroups"])
        conditions.append(
            _condition(
                wk.COND_SECURITY_GROUPS_READY,
                ok,
                "SecurityGroupsNotFound",
                "" if ok else "SecurityGroupSelector did not match any SecurityGroups",
            )
        )
    except Exception as err:
        part = ("securityGroups", wk.COND_SECURITY_GROUPS_READY, "SecurityGroupsResolutionFailed")
        _failed(status, conditions, failed, part, err)

    try:
        status["amis"] = await resolve_amis(ec2, ssm, spec.get("amiSelectorTerms") or [], k8s_version)
        ok = bool(status["amis"])
        conditions.append(
            _condition(wk.COND_AMIS_READY, ok, "AMINotFound", "" if ok else "AMISelector did not match any AMIs")
        )
    except Exception as err:
        _failed(status, conditions, failed, ("amis", wk.COND_AMIS_READY, "AMIResolutionFailed"), err)

    try:
        if spec.get("instanceProfile"):
            profile = str(spec["instanceProfile"])
            await iam.get_instance_profile(InstanceProfileName=profile)
        elif spec.get("role"):
            profile = await ensure_instance_profile(
                iam, role=str(spec["role"]), cluster_name=cluster_name, region=region, nodeclass_name=name
            )
        else:
            raise ValueError("neither spec.role nor spec.instanceProfile is set")
        status["instanceProfile"] = profile
        conditions.append(_condition(wk.COND_INSTANCE_PROFILE_READY, True, ""))
    except ValueError as err:
        conditions.append(_condition(wk.COND_INSTANCE_PROFILE_READY, False, "InstanceProfileCreationFailed", str(err)))
    except Exception as err:
        if is_not_found(err):  # the named profile or the role does not exist: an answer, not a failed read
            conditions.append(
                _condition(wk.COND_INSTANCE_PROFILE_READY, False, "InstanceProfileNotFound", _message(err))
            )
        else:
            part = ("instanceProfile", wk.COND_INSTANCE_PROFILE_READY, "InstanceProfileCreationFailed")
            _failed(status, conditions, failed, part, err)
    return NodeClassResolution(status=status, conditions=conditions, failed=failed)


def _failed(
    status: JSON, conditions: list[JSON], failed: dict[str, str], part: tuple[str, str, str], err: BaseException
) -> None:
    """Record a part (status key, condition type, reason) whose resolution raised.

    A ``ValueError`` is the spec's fault (an unsupported AMI alias family): the part resolves to nothing. Any
    other error is a failed AWS read: the condition applies only to a first resolution and ``failed`` tells the
    status controller to keep the last known value."""
    key, type_, reason = part
    message = _message(err)
    conditions.append(_condition(type_, False, reason, message))
    if isinstance(err, ValueError):
        status[key] = [] if key != "instanceProfile" else ""
    else:
        failed[type_] = message


def _message(err: BaseException) -> str:
    code = error_code(err)
    text = str(err)
    return (f"{code}: {text}" if code and code not in text else text)[:300]
