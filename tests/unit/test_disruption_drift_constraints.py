"""Drift replacement plans respect the moved pods' constraints (issue 7, defect 2, the root in disruption).

A StatefulSet pod whose bound PV pins a zone is planned into that zone (its volume topology is injected, as the
provisioner does), and a sibling on another drifted node still counts for its zone anti-affinity (other drifted
nodes take no pods but keep theirs).
"""

from __future__ import annotations

from typing import Any

from karpy.apis import labels as wk
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.controllers.disruption.types import Command
from tests.unit.disruption_builders import GIB, T0, node, nodeclaim, nodeclass, nodepool, pod
from tests.unit.test_binder_predicate import db_pod, in_zone, zonal_volume
from tests.unit.test_disruption_orchestrator import Harness

JSON = dict[str, Any]


def zonal_types(prices: dict[str, float]) -> list[InstanceType]:
    """One 4-cpu type offered on-demand in every zone of ``prices`` (zone → USD/hour)."""
    return [
        InstanceType(
            name="c.xlarge",
            labels={wk.LABEL_INSTANCE_TYPE: "c.xlarge", wk.LABEL_ARCH: "amd64", wk.LABEL_OS: "linux"},
            capacity={"cpu": 4000, "memory": 8 * GIB, "pods": 110},
            overhead={},
            offerings=tuple(Offering(z, "on-demand", p) for z, p in prices.items()),
        )
    ]


def zoned_claim(name: str, pool: JSON, zone: str, image: str) -> JSON:
    claim = in_zone(nodeclaim(name, pool, instance_type="c.xlarge", image=image), zone)
    claim["status"]["providerID"] = f"aws:///{zone}/i-{name}"
    return claim


async def drift_command(
    objs: list[JSON], prices: dict[str, float], volumes: tuple[JSON, ...] | list[JSON] = ()
) -> Command:
    h = Harness(objs)
    for obj in volumes:  # cluster state only: the fake apiserver does not serve volumes
        h.state.apply(obj["kind"], "ADDED", obj)
    h.cloud.instance_types = zonal_types(prices)
    await h.mark_conditions()
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    command = h.disruption.methods.drift(ctx)
    assert command is not None and command.method == "drift", ctx.blocked
    return command


def zones_of(command: Command) -> list[list[str]]:
    return [[v for r in plan.requirements if r.key == wk.LABEL_ZONE for v in r.values] for plan in command.replacements]


async def test_drift_replacement_stays_in_the_zone_of_the_pods_volume() -> None:
    pool = nodepool(after="Never")
    a = zoned_claim("a", pool, "us-east-1a", image="ami-2")  # current
    c = zoned_claim("c", pool, "us-east-1c", image="ami-1")  # drifted
    objs = [nodeclass(amis=("ami-2",)), pool, a, c, node(a), node(c)]
    objs += [db_pod("db-0", "node-a"), db_pod("db-1", "node-c", claim="data-db-1")]
    # Zone A is excluded by db-0's anti-affinity; B would do for that alone, but db-1's volume lives in C.
    prices = {"us-east-1a": 0.10, "us-east-1b": 0.10, "us-east-1c": 0.10}
    command = await drift_command(objs, prices, zonal_volume("data-db-1", "us-east-1c"))
    assert [c.name for c in command.candidates] == ["c"]
    assert zones_of(command) == [["us-east-1c"]]


async def test_drift_replacement_counts_pods_on_other_drifted_nodes() -> None:
    pool = nodepool(after="Never")
    a = zoned_claim("a", pool, "us-east-1c", image="ami-1")
    b = zoned_claim("b", pool, "us-east-1a", image="ami-1")  # drifted too: no destination, but db-1 is there
    objs = [nodeclass(amis=("ami-2",)), pool, a, b, node(a), node(b)]
    objs += [db_pod("db-0", "node-a"), db_pod("db-1", "node-b")]
    command = await drift_command(objs, {"us-east-1a": 0.10, "us-east-1b": 0.10, "us-east-1c": 0.10})
    assert [c.name for c in command.candidates] == ["a"]
    [zones] = zones_of(command)
    assert zones and "us-east-1a" not in zones, zones


async def test_drifted_nodes_take_no_moved_pods() -> None:
    """Other drifted nodes stay no destination (every pod moves once), even with room to spare."""
    pool = nodepool(after="Never")
    a = zoned_claim("a", pool, "us-east-1a", image="ami-1")
    b = zoned_claim("b", pool, "us-east-1a", image="ami-1")
    objs = [nodeclass(amis=("ami-2",)), pool, a, b, node(a), node(b)]
    objs += [pod("web-0", "node-a", cpu="100m"), pod("web-1", "node-b", cpu="100m")]
    command = await drift_command(objs, {"us-east-1a": 0.10})
    assert [c.name for c in command.candidates] == ["a"]
    assert len(command.replacements) == 1, "web-0 goes to a new node, not onto drifted b"
