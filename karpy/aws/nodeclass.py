"""EC2NodeClass resolution: subnets, security groups, AMIs and the instance profile together (Karpenter AWS
``pkg/controllers/nodeclass/{subnet,securitygroup,ami,instanceprofile}.go``).

:func:`resolve` turns ``spec`` selector terms into the v1 ``status`` shape and one condition per part (SubnetsReady,
SecurityGroupsReady, AMIsReady, InstanceProfileReady, PlacementGroupReady), asking one provider module per part
(:mod:`karpy.aws.subnets`, :mod:`karpy.aws.securitygroups`, :mod:`karpy.aws.amis`, :mod:`karpy.aws.instanceprofiles`,
:mod:`karpy.aws.placementgroups`). AWS errors never raise out of :func:`resolve`: a selector that matched nothing is a
False condition (``SubnetsNotFound``…), while a read that *failed* (connection refused, throttling, a 5xx, access
denied) is reported in ``failed`` with its part's status left out, so the status controller keeps the last known value
(Karpenter's reconcilers return the error and leave ``status`` as it was: a failed DescribeSubnets is never "no
subnets matched").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.aws.amis import AMIProvider, resolve_amis
from karpy.aws.capacityreservations import CapacityReservationProvider, resolve_status
from karpy.aws.errors import error_code, is_not_found
from karpy.aws.instanceprofiles import resolve_instance_profile
from karpy.aws.placementgroups import COND_PLACEMENT_GROUP_READY, PlacementGroupProvider, resolve_condition
from karpy.aws.securitygroups import resolve_security_groups
from karpy.aws.subnets import resolve_subnets
from karpy.runtime.fence import NotLeader


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


async def resolve(
    ec2: Any,
    ssm: Any,
    iam: Any,
    nodeclass: Mapping[str, Any],
    *,
    cluster_name: str,
    region: str,
    k8s_version: str,
    amis: AMIProvider | None = None,
    placement_groups: PlacementGroupProvider | None = None,
    capacity_reservations: CapacityReservationProvider | None = None,
) -> NodeClassResolution:
    """Resolve every part of ``nodeclass`` (EC2NodeClass JSON); failures are conditions, not exceptions.

    ``amis`` caches the AMI part (the cloud provider passes its own); without it the AMIs are read every time.
    ``placement_groups`` likewise for ``PlacementGroupReady`` (:mod:`karpy.aws.placementgroups`; no status
    field, as Karpenter's: the group is resolved again where it is used).
    ``capacity_reservations`` (given when the ``ReservedCapacity`` gate is on) resolves
    ``status.capacityReservations`` and ``CapacityReservationsReady`` (True also when none is selected; None
    removes the status field, as Karpenter's nil does).
    """
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
        terms = spec.get("amiSelectorTerms") or []
        status["amis"] = await (amis.resolve(terms) if amis is not None else resolve_amis(ec2, ssm, terms, k8s_version))
        ok = bool(status["amis"])
        conditions.append(
            _condition(wk.COND_AMIS_READY, ok, "AMINotFound", "" if ok else "AMISelector did not match any AMIs")
        )
    except Exception as err:
        _failed(status, conditions, failed, ("amis", wk.COND_AMIS_READY, "AMIResolutionFailed"), err)

    try:
        status["instanceProfile"] = await resolve_instance_profile(
            iam, spec, cluster_name=cluster_name, region=region, name=name
        )
        conditions.append(_condition(wk.COND_INSTANCE_PROFILE_READY, True, ""))
    except ValueError as err:
        conditions.append(_condition(wk.COND_INSTANCE_PROFILE_READY, False, "InstanceProfileCreationFailed", str(err)))
    except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
        raise
    except Exception as err:
        if is_not_found(err):  # the named profile or the role does not exist: an answer, not a failed read
            conditions.append(
                _condition(wk.COND_INSTANCE_PROFILE_READY, False, "InstanceProfileNotFound", _message(err))
            )
        else:
            part = ("instanceProfile", wk.COND_INSTANCE_PROFILE_READY, "InstanceProfileCreationFailed")
            _failed(status, conditions, failed, part, err)
    if capacity_reservations is not None:
        try:
            status["capacityReservations"] = await resolve_status(capacity_reservations, spec) or None
            conditions.append(_condition(wk.COND_CAPACITY_RESERVATIONS_READY, True, ""))
        except NotLeader:
            raise
        except Exception as err:
            part = ("capacityReservations", wk.COND_CAPACITY_RESERVATIONS_READY, "CapacityReservationsResolutionFailed")
            _failed(status, conditions, failed, part, err)

    condition, error = await resolve_condition(placement_groups or PlacementGroupProvider(ec2), nodeclass)
    conditions.append(condition)
    if error:  # a failed read: the last known condition stands (as for the other parts)
        failed[COND_PLACEMENT_GROUP_READY] = error
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
    # An error may name its own reason (an AMI alias Karpenter refuses for this Kubernetes version: UnsupportedAlias).
    conditions.append(_condition(type_, False, str(getattr(err, "reason", reason)), message))
    if isinstance(err, ValueError):
        status[key] = [] if key != "instanceProfile" else ""
    else:
        failed[type_] = message


def _message(err: BaseException) -> str:
    code = error_code(err)
    text = str(err)
    return (f"{code}: {text}" if code and code not in text else text)[:300]
