"""The instance profile of an EC2NodeClass (Karpenter AWS ``pkg/providers/instanceprofile/instanceprofile.go``).

A profile named in ``spec.instanceProfile`` is used as is (it must exist); with ``spec.role`` karpy creates
(once) and tags a profile named ``<cluster>_<hash(region, nodeclass)>`` holding that role (Karpenter's naming),
replacing any other role in it. Deliberately not done: garbage collection of unreferenced profiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.hashing import stable_hash
from karpy.aws.errors import is_already_exists, is_not_found


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


async def resolve_instance_profile(
    iam: Any, spec: Mapping[str, Any], *, cluster_name: str, region: str, name: str
) -> str:
    """``status.instanceProfile`` of the EC2NodeClass ``name`` with ``spec``.

    Raises:
        ValueError: neither ``spec.role`` nor ``spec.instanceProfile`` is set.
        botocore ClientError: IAM refused (a not-found code: the named profile or the role does not exist).
    """
    if spec.get("instanceProfile"):
        profile = str(spec["instanceProfile"])
        await iam.get_instance_profile(InstanceProfileName=profile)
        return profile
    if spec.get("role"):
        return await ensure_instance_profile(
            iam, role=str(spec["role"]), cluster_name=cluster_name, region=region, nodeclass_name=name
        )
    raise ValueError("neither spec.role nor spec.instanceProfile is set")
