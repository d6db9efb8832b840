"""Reserved offerings in the provisioning simulation (Karpenter core: capacity type ``reserved``, and AWS's
``karpenter.k8s.aws/capacity-reservation-*`` offering labels, DoesNotExist on every other offering)."""

from __future__ import annotations

import attrs
from sched_builders import catalogue, instance_type, nodepool, pod, req, requirement_map

from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling.model import NewNodeClaim, SchedulingResult
from karpy.scheduling.scheduler import solve

CT = "karpenter.sh/capacity-type"
RID = "karpenter.k8s.aws/capacity-reservation-id"
INTERRUPTIBLE = "karpenter.k8s.aws/capacity-reservation-interruptible"
ZONE = "topology.kubernetes.io/zone"


def reserved(it: InstanceType, rid: str, zone: str = "us-east-1b", free: int = 1, **over: object) -> InstanceType:
    """``it`` with a reserved offering of reservation ``rid`` (priced as Karpenter: on-demand / 10,000,000)."""
    on_demand = min(o.price for o in it.offerings if o.capacity_type == "on-demand")
    offering = Offering(
        zone=zone,
        capacity_type="reserved",
        price=on_demand / 10_000_000,
        available=free > 0,
        reservation_id=rid,
        reservation_type="default",
        reservation_capacity=free,
        **over,  # type: ignore[arg-type]
    )
    return attrs.evolve(it, offerings=(*it.offerings, offering))


def catalogue_with(*reserved_types: InstanceType) -> list[InstanceType]:
    names = {it.name for it in reserved_types}
    return [*reserved_types, *(it for it in catalogue() if it.name not in names)]


def only_claim(result: SchedulingResult) -> NewNodeClaim:
    assert not result.errors, result.errors
    assert len(result.new_nodeclaims) == 1, result.new_nodeclaims
    return result.new_nodeclaims[0]


def test_a_reserved_offering_makes_its_type_the_cheapest() -> None:
    m5 = reserved(instance_type("m5.xlarge", 4, 16, 0.192), "cr-1")
    pool = nodepool(types=catalogue_with(m5), requirements=[req(CT, "In", "reserved", "on-demand")])
    claim = only_claim(solve([pod(cpu="1")], [pool], [], []))
    assert claim.instance_types[0].name == "m5.xlarge"
    reqs = requirement_map(claim.requirements)
    assert reqs[CT] == ("In", ("on-demand", "reserved"))
    assert RID not in claim.labels, "the reservation is known only once launched"


def test_a_used_up_reservation_is_not_offered() -> None:
    m5 = reserved(instance_type("m5.xlarge", 4, 16, 0.192), "cr-1", free=0)
    only = nodepool(types=catalogue_with(m5), requirements=[req(CT, "In", "reserved")])
    p = pod(cpu="1")
    assert p.key in solve([p], [only], [], []).errors
    both = nodepool(types=catalogue_with(m5), requirements=[req(CT, "In", "reserved", "on-demand")])
    claim = only_claim(solve([pod(cpu="1")], [both], [], []))
    assert claim.instance_types[0].name == "c5.large"
    assert requirement_map(claim.requirements)[CT] == ("In", ("on-demand",))


def test_pods_select_a_reservation_by_its_labels() -> None:
    m5 = reserved(instance_type("m5.xlarge", 4, 16, 0.192), "cr-1")
    r5 = reserved(instance_type("r5.xlarge", 4, 32, 0.252), "cr-2", zone="us-east-1c", reservation_interruptible=True)
    pool = nodepool(types=catalogue_with(m5, r5), requirements=[req(CT, "In", "reserved", "on-demand")])
    claim = only_claim(solve([pod(cpu="1", node_selector={RID: "cr-2"})], [pool], [], []))
    assert [it.name for it in claim.instance_types] == ["r5.xlarge"]
    reqs = requirement_map(claim.requirements)
    assert (
        reqs[RID] == ("In", ("cr-2",)) and reqs[CT] == ("In", ("reserved",)) and reqs[ZONE] == ("In", ("us-east-1c",))
    )
    lent = only_claim(solve([pod(cpu="1", node_selector={INTERRUPTIBLE: "true"})], [pool], [], []))
    assert [it.name for it in lent.instance_types] == ["r5.xlarge"]
    # Not reserved: every other offering has no reservation label.
    none = only_claim(solve([pod(cpu="1", terms=[[req(RID, "DoesNotExist")]])], [pool], [], []))
    assert requirement_map(none.requirements)[CT] == ("In", ("on-demand",))
