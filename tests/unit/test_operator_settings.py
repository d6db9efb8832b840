"""Settings the composition root wires: CPU_REQUESTS scales the keyed reconcilers' workers (as Karpenter scales
MaxConcurrentReconciles with it, core pkg/utils/controller LinearScaleReconciles); EC2NodeClasses are
re-resolved at the smaller of SUBNET_REFRESH_INTERVAL and SECURITY_GROUP_REFRESH_INTERVAL."""

from __future__ import annotations

from typing import Any

from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.kube.fake import FakeKube
from karpy.operator import Operator
from karpy.settings import Settings, from_environment


class Resolver:
    async def resolve_nodeclass(self, nodeclass: Any) -> Any:
        raise AssertionError("not resolved in this test")


def operator(**env: str) -> Operator:
    settings = from_environment({"CLUSTER_NAME": "c", "DISABLE_LEADER_ELECTION": "true", **env})
    return Operator(settings, FakeKube(), FakeCloudProvider(), nodeclasses=Resolver())


def workers(op: Operator) -> dict[str, int]:
    return {
        name: getattr(op, name).workers
        for name in ("lifecycle", "binder", "terminator", "node_termination", "nodepool_status", "nodeclass_status")
    }


def test_cpu_requests_scale_the_workers() -> None:
    one_core = workers(operator())
    assert one_core == workers(operator(CPU_REQUESTS="1000")) == workers(operator(CPU_REQUESTS="0"))
    # The lifecycle scales as Karpenter's (LinearScaleReconciles(cpus, 1000, 5000)), the rest per core.
    assert one_core["lifecycle"] == 1000 and one_core["binder"] == 4
    three_cores = workers(operator(CPU_REQUESTS="2500"))
    assert three_cores == {name: 1135 if name == "lifecycle" else 3 * count for name, count in one_core.items()}


def test_linear_workers_follow_linear_scale_reconciles() -> None:
    """Karpenter's LinearScaleReconciles(cpus, 1000, 5000): 1000 at one core, int(slope x (cores - 1)) more per
    core, 5000 from 60 cores on; the cores are CPU_REQUESTS rounded up."""

    def at(millicores: int) -> int:
        return Settings(cluster_name="c", cpu_requests=millicores).linear_workers(1000, 5000)

    assert [at(1000), at(1001), at(3000), at(59_000), at(60_000), at(200_000)] == [1000, 1067, 1135, 4932, 5000, 5000]
    assert Settings(cluster_name="c", cpu_requests=2500).cores == 3


def test_nodeclasses_refresh_at_the_tighter_interval() -> None:
    assert operator().nodeclass_status.reconciler.refresh_interval == 60
    op = operator(SUBNET_REFRESH_INTERVAL="5m", SECURITY_GROUP_REFRESH_INTERVAL="2m")
    assert op.nodeclass_status.reconciler.refresh_interval == 120
    op = operator(SUBNET_REFRESH_INTERVAL="3m", SECURITY_GROUP_REFRESH_INTERVAL="10m")
    assert op.nodeclass_status.reconciler.refresh_interval == 180
