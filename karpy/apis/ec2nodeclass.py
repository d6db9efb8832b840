"""The EC2NodeClass (``karpenter.k8s.aws/v1``) as a frozen view, built once per watch event (pure).

Karpenter AWS ``pkg/apis/v1/ec2nodeclass.go`` (spec) and ``ec2nodeclass_status.go`` (status: resolved
``subnets``, ``securityGroups``, ``amis``, ``instanceProfile`` and the conditions whose conjunction is
``Ready``). The spec's selector terms, block devices, user data and kubelet block are read by the AWS
resolution and launch code, which takes the EC2NodeClass JSON (``raw``); the view carries what the controllers
decide on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis.conditions import Condition, ObjectView, conditions_of
from karpy.apis.hashing import nodeclass_ami_family
from karpy.apis.meta import ObjectMeta, object_meta


@attrs.frozen(slots=True)
class Subnet:
    """A resolved subnet (``status.subnets[]``): id, zone name and zone id."""

    id: str
    zone: str = ""
    zone_id: str = ""


@attrs.frozen(slots=True)
class SecurityGroup:
    """A resolved security group (``status.securityGroups[]``)."""

    id: str
    name: str = ""


@attrs.frozen(slots=True)
class AMI:
    """A resolved AMI (``status.amis[]``); ``requirements`` are the instance types it boots, as JSON
    node selector requirements."""

    id: str
    name: str = ""
    deprecated: bool = False
    requirements: tuple[Mapping[str, Any], ...] = ()


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, Sequence) else []


@attrs.frozen(slots=True)
class EC2NodeClass(ObjectView):
    """An EC2NodeClass as cluster state keeps it beside its JSON.

    ``role`` / ``instance_profile``: the spec's (exactly one is set); ``ami_family`` "" when taken from the
    alias; ``kubelet`` the ``spec.kubelet`` block as written. ``status_instance_profile`` is the profile the
    status controller resolved.
    """

    meta: ObjectMeta
    role: str
    instance_profile: str
    ami_family: str
    kubelet: Mapping[str, Any]
    subnets: tuple[Subnet, ...]
    security_groups: tuple[SecurityGroup, ...]
    amis: tuple[AMI, ...]
    status_instance_profile: str
    conditions: tuple[Condition, ...]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> EC2NodeClass:
        """The view of an EC2NodeClass's JSON (``obj`` is kept as ``raw``, not copied)."""
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        kubelet = spec.get("kubelet")
        return cls(
            meta=object_meta(obj),
            role=str(spec.get("role") or ""),
            instance_profile=str(spec.get("instanceProfile") or ""),
            ami_family=str(spec.get("amiFamily") or ""),
            kubelet=kubelet if isinstance(kubelet, Mapping) else {},
            subnets=tuple(
                Subnet(str(s.get("id") or ""), str(s.get("zone") or ""), str(s.get("zoneID") or ""))
                for s in _items(status.get("subnets"))
            ),
            security_groups=tuple(
                SecurityGroup(str(g.get("id") or ""), str(g.get("name") or ""))
                for g in _items(status.get("securityGroups"))
            ),
            amis=tuple(
                AMI(
                    id=str(a.get("id") or ""),
                    name=str(a.get("name") or ""),
                    deprecated=bool(a.get("deprecated")),
                    requirements=tuple(_items(a.get("requirements"))),
                )
                for a in _items(status.get("amis"))
            ),
            status_instance_profile=str(status.get("instanceProfile") or ""),
            conditions=conditions_of(obj),
            raw=obj,
        )

    @property
    def spec(self) -> Mapping[str, Any]:
        """``spec`` as JSON."""
        value = self.raw.get("spec")
        return value if isinstance(value, Mapping) else {}

    @property
    def family(self) -> str:
        """The AMI family (``EC2NodeClass.AMIFamily()``): ``amiFamily``, else the alias's family, else Custom."""
        return nodeclass_ami_family(self.spec)

    @property
    def user_data(self) -> str | None:
        """``spec.userData`` (None when unset)."""
        value = self.spec.get("userData")
        return None if value is None else str(value)

    @property
    def block_device_mappings(self) -> tuple[Mapping[str, Any], ...]:
        """``spec.blockDeviceMappings`` as written (empty: the family's defaults apply)."""
        return tuple(_items(self.spec.get("blockDeviceMappings")))

    @property
    def instance_store_policy(self) -> str | None:
        """``spec.instanceStorePolicy`` (``RAID0``) or None."""
        value = self.spec.get("instanceStorePolicy")
        return None if value is None else str(value)

    @property
    def status(self) -> Mapping[str, Any]:
        """``status`` as JSON (the status controller compares the resolution with it field by field)."""
        value = self.raw.get("status")
        return value if isinstance(value, Mapping) else {}


__all__ = ["AMI", "EC2NodeClass", "SecurityGroup", "Subnet"]
