"""MIN_VALUES_POLICY: Strict fails a NodeClaim whose instance types cannot meet a minValues; BestEffort lowers
minValues to what they give and annotates the NodeClaim (Karpenter ``options.MinValuesPolicy``, core
``pkg/controllers/provisioning/scheduling/scheduler.go`` and ``pkg/cloudprovider/types.go``)."""

from __future__ import annotations

from sched_builders import instance_type, nodepool, pod, pods, req

from karpy.controllers.provisioner import nodeclaim_from_plan
from karpy.scheduling.model import NewNodeClaim, SchedulingResult
from karpy.scheduling.nodeclaim import ANNOTATION_MIN_VALUES_RELAXED
from karpy.scheduling.scheduler import solve

FAMILY = "karpenter.k8s.aws/instance-family"
TYPE = "node.kubernetes.io/instance-type"


def only_claim(result: SchedulingResult) -> NewNodeClaim:
    assert not result.errors, result.errors
    assert len(result.new_nodeclaims) == 1
    return result.new_nodeclaims[0]


def test_best_effort_lowers_min_values_and_annotates_where_strict_fails() -> None:
    family = req(FAMILY, "In", "c5", "m5", "r5", min_values=3)
    p = pod(cpu="1", mem="40Gi")  # only m5.4xlarge fits: one family
    strict = solve([p], [nodepool(requirements=[family])], [], [])
    assert "minValues 3 for karpenter.k8s.aws/instance-family not met" in strict.errors[p.key]
    assert solve([p], [nodepool(requirements=[family])], [], [], min_values_policy="Strict") == strict
    claim = only_claim(solve([p], [nodepool(requirements=[family])], [], [], min_values_policy="BestEffort"))
    assert {r.key: r for r in claim.requirements}[FAMILY].min_values == 1
    assert claim.annotations == {ANNOTATION_MIN_VALUES_RELAXED: "true"}


def test_best_effort_keeps_min_values_it_can_meet_and_does_not_annotate() -> None:
    family = req(FAMILY, "In", "c5", "m5", "r5", min_values=3)
    claim = only_claim(solve([pod(cpu="1")], [nodepool(requirements=[family])], [], [], min_values_policy="BestEffort"))
    assert {r.key: r for r in claim.requirements}[FAMILY].min_values == 3
    assert claim.annotations == {}


def test_best_effort_instance_type_min_values_relax_to_the_types_that_exist() -> None:
    """Karpenter's e2e case: instance-type In [c5.large, two that do not exist], minValues 3."""
    types = req(TYPE, "In", "c5.large", "invalid-instance-type-1", "invalid-instance-type-2", min_values=3)
    p = pod(cpu="1")
    assert p.key in solve([p], [nodepool(requirements=[types])], [], []).errors
    claim = only_claim(solve([p], [nodepool(requirements=[types])], [], [], min_values_policy="BestEffort"))
    type_req = {r.key: r for r in claim.requirements}[TYPE]
    assert (type_req.values, type_req.min_values) == (("c5.large",), 1)
    assert claim.annotations == {ANNOTATION_MIN_VALUES_RELAXED: "true"}


def test_best_effort_packs_as_if_min_values_gave_way() -> None:
    """Strict stops each claim at 4 pods to keep two families; BestEffort packs all 10 on one a.4xlarge."""
    catalogue = [
        instance_type("a.large", 2, 8, 0.1),
        instance_type("a.4xlarge", 16, 64, 0.35),
        instance_type("b.xlarge", 4, 16, 0.2),
    ]
    batch = pods(10, cpu="1", mem=None)
    family = req(FAMILY, "Exists", min_values=2)
    pool = nodepool(types=catalogue, requirements=[family])
    assert [len(c.pods) for c in solve(batch, [pool], [], []).new_nodeclaims] == [4, 4, 2]
    claim = only_claim(solve(batch, [pool], [], [], min_values_policy="BestEffort"))
    assert len(claim.pods) == 10
    assert [it.name for it in claim.instance_types] == ["a.4xlarge"]
    assert {r.key: r for r in claim.requirements}[FAMILY].min_values == 1
    assert claim.annotations == {ANNOTATION_MIN_VALUES_RELAXED: "true"}


def test_the_relaxed_annotation_reaches_the_nodeclaim_object() -> None:
    family = req(FAMILY, "In", "c5", "m5", "r5", min_values=3)
    pool = nodepool(requirements=[family])
    claim = only_claim(solve([pod(cpu="1", mem="40Gi")], [pool], [], [], min_values_policy="BestEffort"))
    nodepool_json = {"metadata": {"name": pool.name}, "spec": {"template": {"spec": {"nodeClassRef": {"name": "x"}}}}}
    obj = nodeclaim_from_plan(claim, nodepool_json)
    assert obj["metadata"]["annotations"][ANNOTATION_MIN_VALUES_RELAXED] == "true"
