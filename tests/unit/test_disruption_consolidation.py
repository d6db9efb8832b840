"""Consolidation decisions over the real engine: delete, single replace, multi-node, spot rules, savings gate."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import InstanceType
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption.candidates import build_candidate
from karpy.controllers.disruption.types import Candidate
from karpy.controllers.provisioner import Provisioner
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.scheduling import model
from karpy.state.cluster import ClusterState
from tests.unit.disruption_builders import (
    CATALOGUE,
    T0,
    following_plans,
    itype,
    loaded_state,
    node,
    nodeclaim,
    nodeclass,
)
from tests.unit.disruption_builders import nodepool as make_nodepool
from tests.unit.disruption_builders import pod as make_pod


async def setup(objs: list[dict], types: list[InstanceType] = CATALOGUE) -> tuple[ClusterState, cons.Simulator, dict]:
    state = loaded_state(objs)
    kube = FakeKube(sink=state)
    prov = Provisioner(kube, state, FakeCloudProvider(types), EventRecorder(kube), plans=following_plans(state))
    pools, _, existing = await prov.simulation_inputs()
    pending = [p.pod for p in prov.pending_pods()]

    def sim(chosen: Any) -> model.SchedulingResult:
        return cons.simulate(chosen, pending, pools, existing, [])

    by_type = {it.name: it for it in types}
    cands = {}
    pool = state.nodepool_view("np")
    assert pool is not None
    for name, claim in state.nodeclaim_views.items():
        n = state.node_for_nodeclaim(claim)
        assert n is not None
        cands[name] = build_candidate(state, claim, n, pool, by_type, T0)
    return state, sim, cands


def cluster(sizes: dict[str, str], pods: dict[str, list[str]], pool: dict | None = None) -> list[dict]:
    pool = pool or make_nodepool()
    objs: list[dict] = [nodeclass(), pool]
    for name, it in sizes.items():
        claim = nodeclaim(name, pool, instance_type=it)
        objs += [claim, node(claim)]
        objs += [
            make_pod(f"{name}-{i}", f"node-{name}", cpu=cpu, owner=f"rs-{name}") for i, cpu in enumerate(pods[name])
        ]
    return objs


async def test_delete_when_pods_fit_on_remaining_nodes() -> None:
    _, sim, c = await setup(cluster({"a": "c.xlarge", "b": "c.xlarge"}, {"a": ["500m"], "b": ["500m"]}))
    command, why = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=False)
    assert why == "" and command is not None
    assert command.decision == "delete" and command.savings == pytest.approx(0.20) and command.pods_moved == 1


async def test_replace_with_one_cheaper_node() -> None:
    """A lone 8-CPU node running 500m is replaced by the cheapest type that fits, priced below it."""
    _, sim, c = await setup(cluster({"a": "c.2xlarge"}, {"a": ["500m"]}))
    command, _ = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=False)
    assert command is not None and command.decision == "replace"
    (plan,) = command.replacements
    assert [it.name for it in plan.instance_types] == ["c.large", "c.xlarge"]
    itype_req = next(r for r in plan.requirements if r.key == wk.LABEL_INSTANCE_TYPE)
    assert itype_req.values == ("c.large", "c.xlarge")
    assert command.savings == pytest.approx(0.30)


async def test_no_command_when_nothing_cheaper_or_pods_do_not_fit() -> None:
    _, sim, c = await setup(cluster({"a": "c.large"}, {"a": ["1500m"]}))
    command, why = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=False)
    assert command is None and why.startswith("no replacement cheaper")
    _, sim, c = await setup(cluster({"a": "c.2xlarge"}, {"a": ["7500m"]}), types=[CATALOGUE[2]])
    command, why = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=False)
    assert command is None and why == "no replacement cheaper than $0.4000/h"
    _, sim, c = await setup(cluster({"a": "c.2xlarge"}, {"a": ["7500m"]}), types=[CATALOGUE[0], CATALOGUE[2]])
    command, why = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=False)
    assert command is None and why == "no replacement cheaper than $0.4000/h"


async def test_unschedulable_candidate_pods_block() -> None:
    _, sim, c = await setup(cluster({"a": "c.2xlarge"}, {"a": ["7500m"]}), types=[CATALOGUE[2]])
    result = sim([c["a"]])
    huge = make_pod("huge", "node-a", cpu="64")
    assert cons.all_candidate_pods_scheduled([c["a"]], result)
    fake = model.SchedulingResult(new_nodeclaims=(), existing={}, errors={"default/a-0": "too big"})
    command, why = cons.consolidation_command([c["a"]], fake, method="single-node", spot_to_spot=False)
    assert command is None and why == "not all pods would schedule"
    assert huge["spec"]["nodeName"] == "node-a"


def spot_pool() -> dict:
    pool = make_nodepool()
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
    ]
    return pool


def spot_cluster() -> list[dict]:
    pool = spot_pool()
    claim = nodeclaim("a", pool, instance_type="c.2xlarge", capacity_type="spot")
    return [nodeclass(), pool, claim, node(claim), make_pod("a-0", "node-a", cpu="500m")]


async def test_spot_to_spot_needs_the_feature_gate_and_15_cheaper_types() -> None:
    """Spot-to-spot consolidation (Karpenter core ``disruption/consolidation.go``, ``computeSpotToSpotConsolidation``):
    with the gate off a spot node is never replaced by spot; with it on, ≥15 cheaper types."""
    many = [itype(f"s{i}.large", 2, 4, 0.10, 0.01 + i * 0.001) for i in range(16)] + [CATALOGUE[2]]
    _, sim, c = await setup(spot_cluster(), types=many)
    cand = c["a"]
    assert cand.price == pytest.approx(0.12)
    off, _ = cons.consolidation_command([cand], sim([cand]), method="single-node", spot_to_spot=False)
    assert off is not None, "a cheaper on-demand replacement stays possible"
    assert {o for r in off.replacements for o in _ctypes(r)} == {"on-demand"}
    assert all(it.name.startswith("s") for it in off.replacements[0].instance_types)
    on, _ = cons.consolidation_command([cand], sim([cand]), method="single-node", spot_to_spot=True)
    assert on is not None and _ctypes(on.replacements[0]) == ("spot",)
    assert len(on.replacements[0].instance_types) == cons.SPOT_TO_SPOT_MIN_TYPES
    few = [itype(f"s{i}.large", 2, 4, 0.50, 0.01) for i in range(3)] + [CATALOGUE[2]]
    _, sim, c = await setup(spot_cluster(), types=few)
    none, why = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=True)
    assert none is None and "15 cheaper types" in why


def _ctypes(plan: model.NewNodeClaim) -> tuple[str, ...]:
    return next(r.values for r in plan.requirements if r.key == wk.LABEL_CAPACITY_TYPE)


async def test_spot_only_pool_spot_candidate_without_gate_is_not_replaced() -> None:
    pool = make_nodepool()
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["spot"]}
    ]
    claim = nodeclaim("a", pool, instance_type="c.2xlarge", capacity_type="spot")
    _, sim, c = await setup([nodeclass(), pool, claim, node(claim), make_pod("a-0", "node-a")])
    command, why = cons.consolidation_command([c["a"]], sim([c["a"]]), method="single-node", spot_to_spot=False)
    assert command is None and "SpotToSpotConsolidation is disabled" in why


async def test_multi_node_binary_search_takes_largest_prefix() -> None:
    """Three half-empty 4-CPU nodes (0.20 each) → one 2-CPU node (0.10): all three in one command."""
    objs = cluster({"a": "c.xlarge", "b": "c.xlarge", "c": "c.xlarge"}, {"a": ["500m"], "b": ["500m"], "c": ["500m"]})
    _, sim, c = await setup(objs)
    ordered = cons.sort_for_multi(list(c.values()))
    command = cons.multi_node(ordered, sim, spot_to_spot=False, accept=lambda cmd: True)
    assert command is not None and len(command.candidates) == 3 and command.decision == "replace"
    assert command.savings == pytest.approx(0.50)
    only_deletes = cons.multi_node(ordered, sim, spot_to_spot=False, accept=lambda cmd: cmd.decision == "delete")
    assert only_deletes is not None and len(only_deletes.candidates) == 2 and only_deletes.decision == "delete"
    assert cons.multi_node(ordered[:1], sim, spot_to_spot=False, accept=lambda cmd: True) is None


async def test_single_node_order_and_reasons() -> None:
    objs = cluster({"a": "c.2xlarge", "b": "c.large"}, {"a": ["500m", "500m"], "b": ["1500m"]})
    _, sim, c = await setup(objs)
    command, why = cons.single_node(list(c.values()), sim, spot_to_spot=False, accept=lambda cmd: cmd.savings > 0.25)
    assert command is not None and [x.name for x in command.candidates] == ["a"]
    assert why == {}
    command, why = cons.single_node(list(c.values()), sim, spot_to_spot=False, accept=lambda cmd: False)
    assert command is None and set(why) == {"a", "b"}
    assert "does not pay" in why["a"]


async def test_sort_orders() -> None:
    objs = cluster({"a": "c.2xlarge", "b": "c.large"}, {"a": ["500m"], "b": ["500m", "500m", "500m"]})
    _, _, c = await setup(objs)
    cands: list[Candidate] = list(c.values())
    assert [x.name for x in cons.sort_for_multi(cands)] == ["a", "b"]
    assert [x.name for x in cons.sort_for_single(cands)] == ["a", "b"]


async def test_drift_replacements_take_any_number_of_nodes() -> None:
    objs = cluster({"a": "c.2xlarge"}, {"a": ["1500m", "1500m", "1500m"]})
    _, sim, c = await setup(objs, types=[CATALOGUE[0]])
    plans = cons.replacements_for_drift(c["a"], sim([c["a"]]))
    assert plans is not None and len(plans) == 3


async def test_multi_node_prefers_fewer_pods_moved_on_equal_savings() -> None:
    """Three 1-CPU pods on three 4-CPU nodes: deleting two (pods onto the third) saves as much as replacing all
    three by one 4-CPU node, and moves two pods instead of three."""
    objs = cluster({"a": "c.xlarge", "b": "c.xlarge", "c": "c.xlarge"}, {"a": ["1"], "b": ["1"], "c": ["1"]})
    _, sim, c = await setup(objs, types=[CATALOGUE[1], CATALOGUE[2]])
    ordered = cons.sort_for_multi(list(c.values()))
    three, _ = cons.consolidation_command(ordered, sim(ordered), method="single-node", spot_to_spot=False)
    assert three is not None and three.decision == "replace" and three.savings == pytest.approx(0.40)
    # as a multi-node move it is none: the replacement would be the candidates' own c.xlarge
    assert cons.consolidation_command(ordered, sim(ordered), method="multi-node", spot_to_spot=False)[0] is None
    command = cons.multi_node(ordered, sim, spot_to_spot=False, accept=lambda cmd: True)
    assert command is not None and command.decision == "delete" and len(command.candidates) == 2
    assert command.savings == pytest.approx(0.40) and command.pods_moved == 2


async def test_multi_node_never_replaces_nodes_by_their_own_instance_type() -> None:
    """Karpenter ``multinodeconsolidation.go`` ``filterOutSameInstanceType``: two c.xlarge nodes are not replaced
    by one c.xlarge (deleting one of them does the same with half the evictions): the replacement must be
    cheaper than the candidates' own type, here leaving nothing, so multi-node finds no move."""
    objs = cluster({"a": "c.xlarge", "b": "c.xlarge"}, {"a": ["1500m"], "b": ["1500m"]})
    _, sim, c = await setup(objs, types=[CATALOGUE[1], CATALOGUE[2]])
    ordered = cons.sort_for_multi(list(c.values()))
    same, _ = cons.consolidation_command(ordered, sim(ordered), method="single-node", spot_to_spot=False)
    assert same is not None and [it.name for it in same.replacements[0].instance_types] == ["c.xlarge"]
    assert cons.multi_node(ordered, sim, spot_to_spot=False, accept=lambda cmd: True) is None
    command, why = cons.consolidation_command(ordered, sim(ordered), method="multi-node", spot_to_spot=False)
    assert command is None and "own instance type" in why  # what validation re-derives


async def test_method_timeouts() -> None:
    """Single-node stops evaluating at its deadline; multi-node returns the best found before it."""
    objs = cluster({"a": "c.xlarge", "b": "c.xlarge", "c": "c.xlarge"}, {"a": ["1"], "b": ["1"], "c": ["1"]})
    _, sim, c = await setup(objs, types=[CATALOGUE[1], CATALOGUE[2]])
    ticks = iter(range(100))
    command, why = cons.single_node(
        list(c.values()), sim, spot_to_spot=False, accept=lambda cmd: False, timeout=1.5, clock=lambda: next(ticks)
    )
    assert command is None and sum("timed out" in w for w in why.values()) == 2
    ordered = cons.sort_for_multi(list(c.values()))
    assert cons.multi_node(ordered, sim, spot_to_spot=False, accept=lambda cmd: True, timeout=0.0) is None


async def test_simulation_applies_the_provisioners_preference_policy() -> None:
    """The disruption simulation schedules with the provisioner's options (Karpenter core
    ``disruption/helpers.go`` ``SimulateScheduling``): preferred anti-affinity keeps the two moved pods apart under
    ``Respect`` and is dropped under ``Ignore``."""
    objs = cluster({"a": "c.xlarge", "b": "c.xlarge"}, {"a": ["500m"], "b": ["500m"]})
    apart = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "topologyKey": wk.LABEL_HOSTNAME,
                        "labelSelector": {"matchLabels": {"tier": "web"}},
                    },
                }
            ]
        }
    }
    for obj in objs:
        if obj["kind"] == "Pod":
            obj["metadata"]["labels"]["tier"] = "web"
            obj["spec"]["affinity"] = apart
    state = loaded_state(objs)
    kube = FakeKube(sink=state)
    prov = Provisioner(kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), plans=following_plans(state))
    pools, _, existing = await prov.simulation_inputs()
    pool = state.nodepool_view("np")
    assert pool is not None
    by_type = {it.name: it for it in CATALOGUE}
    both = []
    for claim in state.nodeclaim_views.values():
        n = state.node_for_nodeclaim(claim)
        assert n is not None
        both.append(build_candidate(state, claim, n, pool, by_type, T0))

    def new_nodes(policy: str) -> int:
        options = cons.SolveOptions(preference_policy=policy)
        result = cons.simulate(both, [], pools, existing, [], options=options)
        assert cons.all_candidate_pods_scheduled(both, result)
        return len(result.new_nodeclaims)

    assert new_nodes("Respect") == 2
    assert new_nodes("Ignore") == 1
