"""EC2 placement groups named by an EC2NodeClass's ``spec.placementGroupSelector`` (Karpenter AWS
``pkg/providers/placementgroup/{provider,types}.go``, ``pkg/controllers/nodeclass/placementgroup.go``, the
placement parts of ``pkg/providers/launchtemplate``, ``pkg/cloudprovider/{cloudprovider,drift}.go``).

The selector names one existing group by ``name`` or by ``id`` (the CRD makes them exclusive); karpy never creates
or deletes it. :class:`PlacementGroupProvider` resolves it with ``DescribePlacementGroups`` (``GroupNames`` or
``GroupIds``, filter ``state=available``), first group of the answer, as Karpenter does, caching the answer
(the group or "none") for :data:`PLACEMENT_GROUPS` (1 minute) and the last group found for
:data:`PLACEMENT_GROUPS_AVAILABLE` (24 hours): when a later read fails, the last group found is still used for
launches, the reader is told of the failure (Karpenter returns both the stale group and the error).

The pure pieces used by the launch, the NodeClaim labels, the status condition and drift:

* :func:`describe_input`: the DescribePlacementGroups arguments of a selector;
* :func:`launch_placement`: ``LaunchTemplateData.Placement`` fields ``GroupId`` and, for a ``partition`` group
  whose NodeClaim requires ``karpenter.k8s.aws/placement-group-partition``, ``PartitionNumber`` (the lowest
  required value, as Karpenter picks it; EC2 accepts one);
* :func:`nodeclaim_labels`: ``karpenter.k8s.aws/placement-group-id`` and, for a partition group, the partition
  (``karpenter.k8s.aws/placement-group-partition``: the required one, else the partition EC2 chose, read back
  from the instance; Karpenter leaves it empty and fills it in a registration hook from DescribeInstances);
* :func:`placement_group_condition`: ``PlacementGroupReady`` (True without a selector; False
  ``PlacementGroupNotFound`` or ``PlacementGroupResolutionFailed``);
* :func:`placement_group_drift`: ``PlacementGroupDrift`` when the NodeClaim's placement-group-id label differs
  from the group the selector resolves to now (selector added, removed, or the group replaced).

karpy differs from Karpenter in documented places (README): a ``DescribePlacementGroups`` answered with
``InvalidPlacementGroup.Unknown`` (EC2's answer for a name it does not know) is "not found", not a failed read; a
launch whose selector finds no group is refused (``NodeClassNotReadyError``) rather than made outside any group;
a partition group's offerings are not expanded per partition (EC2 picks the partition unless the NodeClaim
requires one); insufficient-capacity marks are not scoped to the group; drift is not judged when the group cannot
be read and nothing is known of it (Karpenter would compare against "no group" and drift every node of the
NodeClass).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.aws.cache import CacheTTL, Timer, ttl_cache
from karpy.aws.errors import error_code, is_not_found

COND_PLACEMENT_GROUP_READY: Final = wk.COND_PLACEMENT_GROUP_READY
PLACEMENT_GROUP_DRIFT: Final = "PlacementGroupDrift"
STRATEGY_CLUSTER: Final = "cluster"
STRATEGY_PARTITION: Final = "partition"
STRATEGY_SPREAD: Final = "spread"
# EC2's answers for a group it does not know (by name; by id): an answer, not a failed read.
UNKNOWN_GROUP_CODES: Final = frozenset(
    {"InvalidPlacementGroup.Unknown", "InvalidPlacementGroupId.NotFound", "InvalidPlacementGroupId.Malformed"}
)

PLACEMENT_GROUPS: Final = CacheTTL(
    "placement group answers per selector",
    60.0,
    "pkg/operator/operator.go: the placement group cache is DefaultTTL (1 m)",
    "a launch burst costs one DescribePlacementGroups; a group created or replaced is seen within a minute",
)
PLACEMENT_GROUPS_AVAILABLE: Final = CacheTTL(
    "last placement group found per selector",
    24 * 3600.0,
    "pkg/cache/cache.go PlacementGroupAvailabilityTTL (24 h)",
    "launches and drift keep using the group through a DescribePlacementGroups outage",
)


@attrs.frozen(slots=True)
class PlacementGroup:
    """A resolved placement group: ``id`` (``pg-…``), ``name``, ``strategy`` (cluster, partition, spread),
    ``partition_count`` (partition groups; 0 otherwise) and ``spread_level`` (spread groups: rack or host)."""

    id: str
    name: str
    strategy: str
    partition_count: int = 0
    spread_level: str = ""

    @classmethod
    def from_ec2(cls, group: Mapping[str, Any]) -> PlacementGroup:
        """From one ``DescribePlacementGroups`` entry (Karpenter ``PlacementGroupFromEC2``)."""
        return cls(
            id=str(group.get("GroupId") or ""),
            name=str(group.get("GroupName") or ""),
            strategy=str(group.get("Strategy") or ""),
            partition_count=int(group.get("PartitionCount") or 0),
            spread_level=str(group.get("SpreadLevel") or ""),
        )


@attrs.frozen(slots=True)
class Selector:
    """``spec.placementGroupSelector``: ``id`` or ``name`` ("" when unset)."""

    id: str = ""
    name: str = ""

    @property
    def text(self) -> str:
        """The name, else the id (Karpenter's messages name the group this way)."""
        return self.name or self.id


def selector_of(nodeclass: Mapping[str, Any]) -> Selector | None:
    """The EC2NodeClass's (JSON) placement group selector, None when it has none."""
    raw = (nodeclass.get("spec") or {}).get("placementGroupSelector")
    if not isinstance(raw, Mapping):
        return None
    selector = Selector(id=str(raw.get("id") or ""), name=str(raw.get("name") or ""))
    return selector if selector.text else None


def describe_input(selector: Selector) -> JSON:
    """``DescribePlacementGroups`` arguments (Karpenter ``Query.DescribePlacementGroupsInput``): available
    groups only; ``GroupIds`` when the selector has an id, else ``GroupNames`` (a name starting ``pg-`` is still a
    name)."""
    kwargs: JSON = {"Filters": [{"Name": "state", "Values": ["available"]}]}
    if selector.id:
        kwargs["GroupIds"] = [selector.id]
    else:
        kwargs["GroupNames"] = [selector.name]
    return kwargs


def required_partition(requirements: Sequence[Mapping[str, Any]]) -> int | None:
    """The lowest partition number an ``In`` requirement on ``karpenter.k8s.aws/placement-group-partition`` allows
    (Karpenter sorts the values as strings and takes the first that parses), None without one."""
    for req in requirements:
        if req.get("key") == wk.LABEL_PLACEMENT_GROUP_PARTITION and req.get("operator") == "In":
            for value in sorted(str(v) for v in req.get("values") or []):
                if value.isdigit():
                    return int(value)
    return None


def launch_placement(group: PlacementGroup | None, requirements: Sequence[Mapping[str, Any]]) -> JSON:
    """``LaunchTemplateData.Placement``'s group fields (Karpenter ``buildPlacement``): ``{}`` without a group,
    else ``GroupId`` and, for a partition group with a required partition other than 0, ``PartitionNumber``."""
    if group is None:
        return {}
    out: JSON = {"GroupId": group.id}
    if group.strategy == STRATEGY_PARTITION:
        partition = required_partition(requirements)
        if partition:  # Karpenter omits 0 (its zero value)
            out["PartitionNumber"] = partition
    return out


def nodeclaim_labels(
    group: PlacementGroup | None, requirements: Sequence[Mapping[str, Any]], instance_partition: int | None = None
) -> dict[str, str]:
    """The NodeClaim's placement labels (Karpenter ``instanceToNodeClaim``): the group id, and for a partition
    group the partition the NodeClaim required, else the one EC2 placed the instance in (``instance_partition``,
    from DescribeInstances ``Placement.PartitionNumber``), else "" (unknown yet)."""
    if group is None:
        return {}
    labels = {wk.LABEL_PLACEMENT_GROUP_ID: group.id}
    if group.strategy == STRATEGY_PARTITION:
        partition = required_partition(requirements)
        if partition is None:
            partition = instance_partition
        labels[wk.LABEL_PLACEMENT_GROUP_PARTITION] = "" if partition is None else str(partition)
    return labels


def supports_strategy(info: Mapping[str, Any], group: PlacementGroup | None) -> bool:
    """Whether an instance type (a DescribeInstanceTypes entry) can join ``group`` (Karpenter ``compatibility.go``
    ``placementGroupCheck``: its ``PlacementGroupInfo.SupportedStrategies`` has the group's strategy; always True
    without a group)."""
    if group is None:
        return True
    return group.strategy in ((info.get("PlacementGroupInfo") or {}).get("SupportedStrategies") or [])


def placement_group_condition(selector: Selector | None, group: PlacementGroup | None, error: str = "") -> JSON:
    """``PlacementGroupReady`` (Karpenter ``PlacementGroupReconciler``): False ``PlacementGroupResolutionFailed``
    when the read failed, False ``PlacementGroupNotFound`` when the selector matched nothing, True otherwise
    (also without a selector). A dict with type, status, reason and message."""
    cond = COND_PLACEMENT_GROUP_READY
    if error:
        return {"type": cond, "status": "False", "reason": "PlacementGroupResolutionFailed", "message": error[:300]}
    if group is None and selector is not None:
        message = f'Placement group "{selector.text}" not found'
        return {"type": cond, "status": "False", "reason": "PlacementGroupNotFound", "message": message}
    return {"type": cond, "status": "True", "reason": cond, "message": ""}


def placement_group_drift(labels: Mapping[str, str], group: PlacementGroup | None) -> str:
    """``PlacementGroupDrift`` when the NodeClaim's ``karpenter.k8s.aws/placement-group-id`` label (``labels``)
    is not the id of ``group`` (the selector's group now; None: no selector or no group), "" otherwise
    (Karpenter ``isPlacementGroupDrifted``)."""
    return PLACEMENT_GROUP_DRIFT if labels.get(wk.LABEL_PLACEMENT_GROUP_ID, "") != (group.id if group else "") else ""


async def instance_partition(ec2: Any, instance_id: str) -> int | None:
    """The partition EC2 placed ``instance_id`` in (DescribeInstances ``Placement.PartitionNumber``, as
    Karpenter's ``PlacementGroupRegistrationHook`` reads it); None when EC2 does not say (absent or 0) or the read
    fails (the label then stays empty)."""
    try:
        response = await ec2.describe_instances(InstanceIds=[instance_id])
    except Exception:  # best effort: the label is informational, the launch already succeeded
        return None
    for reservation in response.get("Reservations") or []:
        for instance in reservation.get("Instances") or []:
            number = (instance.get("Placement") or {}).get("PartitionNumber")
            if number:  # numbered from 1: 0 says nothing (Karpenter partitionNumberFromInstance)
                return int(number)
    return None


async def resolve_condition(provider: PlacementGroupProvider, nodeclass: Mapping[str, Any]) -> tuple[JSON, str]:
    """The EC2NodeClass's ``PlacementGroupReady`` condition and the failure message ("" when the read did not
    fail): the EC2NodeClass status controller's part (Karpenter ``PlacementGroupReconciler``)."""
    lookup = await provider.lookup(nodeclass)
    return placement_group_condition(selector_of(nodeclass), lookup.group, lookup.error), lookup.error


@attrs.frozen(slots=True)
class Lookup:
    """One resolution: the group (None: no selector or nothing matched; on a failed read, the last group found
    within 24 hours, if any) and the failure (""; else the error message)."""

    group: PlacementGroup | None
    error: str = ""


class PlacementGroupProvider:
    """Resolves selectors through ``DescribePlacementGroups`` with Karpenter's two caches (module docstring).

    Args:
        ec2: an open aiobotocore EC2 client.
        clock: monotonic seconds for the caches (tests inject one).
    """

    def __init__(self, ec2: Any, clock: Timer = time.monotonic) -> None:
        self.ec2 = ec2
        self._answers = ttl_cache(PLACEMENT_GROUPS, clock)
        self._available = ttl_cache(PLACEMENT_GROUPS_AVAILABLE, clock)

    def forget(self) -> None:
        """Drop the 1-minute answers (the next lookup asks EC2; the day-long last groups stay)."""
        self._answers.clear()

    async def lookup(self, nodeclass: Mapping[str, Any]) -> Lookup:
        """The EC2NodeClass's (JSON) placement group; never raises for an AWS failure (see :class:`Lookup`)."""
        selector = selector_of(nodeclass)
        if selector is None:
            return Lookup(None)
        if selector in self._answers:
            return Lookup(self._answers[selector])
        try:
            response = await self.ec2.describe_placement_groups(**describe_input(selector))
            groups = response.get("PlacementGroups") or []
        except Exception as err:
            if not (is_not_found(err) or error_code(err) in UNKNOWN_GROUP_CODES):
                code = error_code(err)
                text = str(err)
                message = f"describing placement groups, {code + ': ' if code and code not in text else ''}{text}"
                return Lookup(self._available.get(selector), message)
            groups = []
        group = PlacementGroup.from_ec2(groups[0]) if groups else None
        if group is not None:
            self._available[selector] = group
        self._answers[selector] = group
        return Lookup(group)


__all__ = [
    "COND_PLACEMENT_GROUP_READY",
    "PLACEMENT_GROUPS",
    "PLACEMENT_GROUPS_AVAILABLE",
    "PLACEMENT_GROUP_DRIFT",
    "Lookup",
    "PlacementGroup",
    "PlacementGroupProvider",
    "Selector",
    "describe_input",
    "instance_partition",
    "launch_placement",
    "nodeclaim_labels",
    "placement_group_condition",
    "placement_group_drift",
    "required_partition",
    "resolve_condition",
    "selector_of",
    "supports_strategy",
]
