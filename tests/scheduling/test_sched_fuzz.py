"""Random mixes of every constraint: the solve never raises, accounts for every pod once, and its plans hold."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import daemonset, existing, instance_type, nodepool, pod, req, selector, spread, term

from karpy.scheduling.model import Pod, Taint, Toleration
from karpy.scheduling.scheduler import solve

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CT = "karpenter.sh/capacity-type"
KEYS = (ZONE, HOST, CT, "rack")


def random_pod(rng: random.Random) -> Pod:
    app = rng.choice("abc")
    kw: dict[str, Any] = {"labels": {"app": app, "tier": rng.choice(("x", "y"))}}
    roll = rng.random()
    sel = selector(app=rng.choice("abc"))
    if roll < 0.2:
        kw["spread"] = [spread(rng.choice(KEYS), max_skew=rng.choice((1, 2)), sel=sel, anyway=rng.random() < 0.3)]
    elif roll < 0.35:
        kw["affinity"] = [term(rng.choice(KEYS), sel)]
    elif roll < 0.5:
        kw["anti"] = [term(rng.choice(KEYS), sel)]
    elif roll < 0.6:
        kw["pref_anti"] = [term(rng.choice(KEYS), sel, weight=rng.randint(1, 100))]
        kw["pref_terms"] = [(5, [req(ZONE, "In", rng.choice(("us-east-1a", "eu-west-1a")))])]
    if rng.random() < 0.2:
        kw["terms"] = [[req(ZONE, "In", "us-east-1b")], [req(CT, "In", "spot")]]
    if rng.random() < 0.1:
        kw["volume_terms"] = [[req(ZONE, "In", rng.choice(("us-east-1a", "us-east-1c")))]]
    if rng.random() < 0.1:
        kw["tolerations"] = [Toleration("dedicated", "Exists")]
    if rng.random() < 0.05:
        kw["ports"] = [8080]
    return pod(cpu=rng.choice(("100m", "500m", "1", "3")), mem=rng.choice(("128Mi", "1Gi", "6Gi")), **kw)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("policy", ["Respect", "Ignore"])
def test_random_constraints(seed: int, policy: str) -> None:
    rng = random.Random(seed)
    types = [
        instance_type("m5.large", 2, 8, 0.096, capacity_types=("on-demand", "spot"), spot_price=0.04),
        instance_type("m5.2xlarge", 8, 32, 0.384, capacity_types=("on-demand", "spot"), spot_price=0.15),
        instance_type("m5.8xlarge", 32, 128, 1.536),
    ]
    pools = [
        nodepool("main", types=types, weight=rng.choice((0, 10))),
        nodepool("dedicated", types=types, taints=[Taint("dedicated", "NoSchedule")], weight=5),
        nodepool("soft", types=types, taints=[Taint("soft", "PreferNoSchedule")], limits={"cpu": 40_000}),
    ]
    bound = [random_pod(rng) for _ in range(4)]
    nodes = [
        existing("n1", labels={ZONE: "us-east-1a", CT: "on-demand"}, used_cpu="1", bound=bound[:2]),
        existing("n2", labels={ZONE: "us-east-1c"}, bound=bound[2:]),
    ]
    batch = [random_pod(rng) for _ in range(60)]
    result = solve(batch, pools, nodes, [daemonset("agent")], preference_policy=policy)
    placed = [p.key for c in result.new_nodeclaims for p in c.pods]
    placed += [p.key for ps in result.existing.values() for p in ps]
    assert sorted(placed + list(result.errors)) == sorted(p.key for p in batch)
    for claim in result.new_nodeclaims:
        assert claim.instance_types
        alloc = claim.instance_types[0].allocatable
        assert all(v <= alloc.get(k, 0) for k, v in claim.requests.items())
        for p in claim.pods:
            for t in p.pod_anti_affinity:
                if t.topology_key == HOST:
                    assert t.selector is not None  # random_pod's terms always select an app
                    app = dict(t.selector.match_labels)["app"]
                    others = [q for q in claim.pods if q is not p and q.labels.get("app") == app]
                    assert not others
