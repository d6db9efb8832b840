"""The scheduling benchmark runs end to end on small sizes and its plans pass the correctness gates."""

from __future__ import annotations

import pytest

scheduling = pytest.importorskip("benchmarks.scheduling")


def test_mixed_workload_schedules_everything_near_the_bound() -> None:
    pools, daemons = scheduling.mixed_nodepools(), scheduling.mixed_daemonsets()
    pods = scheduling.mixed_pods(400)
    row = scheduling.measure(
        "mixed",
        pods,
        lambda ps: scheduling.solve(ps, pools, [], daemons, preference_policy="Ignore"),
        1,
        scheduling.mixed_lower_bound(pods, pools, dict(daemons[0].pod.requests)),
        "Ignore",
        None,
    )
    assert row.errors == 0
    assert row.checks == ()
    assert 0 <= row.over < 0.15


def test_karpenter_inputs_match_published_node_counts() -> None:
    try:
        kbi = scheduling.load_inputs()
    except SystemExit:
        pytest.skip("../shared/tools/karpenter_bench_inputs.py is not available")
    pool = scheduling.bench_nodepool(scheduling.fake_catalogue(kbi))
    for n in (50, 500):
        pods = [scheduling.to_pod(p) for p in kbi.inputs_for([f"D{n}"])[0]]
        for policy in scheduling.POLICIES:
            result = scheduling.solve(pods, [pool], [], [], preference_policy=policy)
            assert len(result.new_nodeclaims) == n // 5
            assert scheduling.checks(result) == ()
