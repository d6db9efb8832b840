"""The live side-by-side benchmark's pure parts (benchmarks/live/mix.py, report.py): the
workload mix, the NodePools, the fair catalogue carrying karpy's own allocatable, pod timings, the timeline, audit
counting of writes and requests, medians and the table. Nothing here starts a cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.live import mix, report, runtime
from benchmarks.live.catalogue import karpy_prices
from e2e.helpers import KarpyProcess

KARPY = "system:serviceaccount:karpy:karpy"


# -- the mix ---------------------------------------------------------------------------------------------------------


def _by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["labels"]["mix"]: d for d in docs}


def test_workload_has_every_part_and_the_right_pod_count() -> None:
    docs = mix.workload(1000)
    assert sum(d["spec"]["replicas"] for d in docs) == 1000
    kinds = _by_kind(docs)
    assert set(kinds) == {"plain", "zone-spread", "hostname-anti-affinity", "memory-pool"}
    plain = [d for d in docs if d["metadata"]["labels"]["mix"] == "plain"]
    assert len(plain) == 3
    for d in docs:
        assert d["spec"]["selector"]["matchLabels"]["app"] == d["metadata"]["name"]
        assert d["spec"]["template"]["metadata"]["labels"]["bench"] == "bench"


def test_zone_spread_and_anti_affinity_are_hard_constraints() -> None:
    kinds = _by_kind(mix.workload(1000))
    spread = kinds["zone-spread"]["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["labelSelector"] == {"matchLabels": {"app": kinds["zone-spread"]["metadata"]["name"]}}
    anti = kinds["hostname-anti-affinity"]
    affinity = anti["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term[0]["topologyKey"] == "kubernetes.io/hostname"
    # one node per pod: a small share
    assert 0 < anti["spec"]["replicas"] <= 20


def test_memory_pool_pods_select_and_tolerate_the_second_pool() -> None:
    spec = _by_kind(mix.workload(1000))["memory-pool"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"karpenter.sh/nodepool": "memory"}
    assert spec["tolerations"] == [{"key": mix.MEMORY_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    pools = {p["metadata"]["name"]: p for p in mix.nodepools("karpenter")}
    assert pools["memory"]["spec"]["template"]["spec"]["taints"][0]["key"] == mix.MEMORY_TAINT
    assert "taints" not in pools["general"]["spec"]["template"]["spec"]


def test_pod_sizes_are_in_the_realistic_range() -> None:
    from karpy.apis.quantity import to_canonical

    for d in mix.workload(5000):
        requests = d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert 250 <= to_canonical("cpu", requests["cpu"]) <= 2000
        assert 256 * 2**20 <= to_canonical("memory", requests["memory"]) <= 4 * 2**30


def test_too_few_pods_for_the_mix() -> None:
    with pytest.raises(ValueError):
        mix.workload(5)


def test_nodepools_differ_only_in_the_nodeclass() -> None:
    karpy, karpenter = mix.nodepools("karpy"), mix.nodepools("karpenter")
    assert karpy[0]["spec"]["template"]["spec"]["nodeClassRef"]["kind"] == "EC2NodeClass"
    assert karpenter[0]["spec"]["template"]["spec"]["nodeClassRef"]["kind"] == "KWOKNodeClass"
    for a, b in zip(karpy, karpenter, strict=True):
        a["spec"]["template"]["spec"].pop("nodeClassRef")
        b["spec"]["template"]["spec"].pop("nodeClassRef")
        assert a == b
    reqs = {r["key"]: r["values"] for r in karpy[0]["spec"]["template"]["spec"]["requirements"]}
    assert reqs["karpenter.sh/capacity-type"] == ["on-demand"]
    assert set(reqs["node.kubernetes.io/instance-type"]) == set(mix.type_names(mix.GENERAL_FAMILIES))


# -- the fair catalogue ----------------------------------------------------------------------------------------------


def test_fair_catalogue_gives_kwok_karpys_allocatable() -> None:
    from karpy.apis.quantity import to_canonical

    infos, prices = mix.moto_instance_types(), karpy_prices()
    entries = {e["name"]: e for e in mix.fair_kwok_types(infos, prices)}
    assert set(entries) == set(mix.all_type_names())
    entry = entries["m6a.large"]
    alloc = mix.karpy_allocatable(infos["m6a.large"])
    # KWOK subtracts a flat 100m / 10Mi from the file's resources: what is left is karpy's allocatable.
    assert to_canonical("cpu", entry["resources"]["cpu"]) - 100 == alloc["cpu"]
    assert to_canonical("memory", entry["resources"]["memory"]) - 10 * 2**20 == alloc["memory"]
    assert int(entry["resources"]["pods"]) == alloc["pods"] == 29  # the ENI limit: 3 ENIs x (10 - 1) + 2
    assert alloc["cpu"] < 2000 and alloc["memory"] < 8 * 2**30  # kube-reserved and eviction taken off
    assert entry["architecture"] == "amd64"
    assert {o["Price"] for o in entry["offerings"]} == {prices["m6a.large"]}
    zones = [o["Requirements"][1]["values"][0] for o in entry["offerings"]]
    assert zones == list(mix.ZONES)
    assert all(o["Requirements"][0]["values"] == ["on-demand"] for o in entry["offerings"])


# -- timings and the timeline ------------------------------------------------------------------------------------------


def _pod(created: str, scheduled: str | None, ready: str | None) -> dict:
    conditions = []
    if scheduled:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled})
    if ready:
        conditions.append({"type": "Ready", "status": "True", "lastTransitionTime": ready})
    return {"metadata": {"creationTimestamp": created}, "status": {"conditions": conditions}}


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert report.percentile(values, 0.5) == 50.0
    assert report.percentile(values, 0.99) == 99.0
    assert report.percentile([3.0], 0.99) == 3.0
    assert report.percentile([], 0.5) == 0.0


def test_pod_times_use_the_pods_own_timestamps() -> None:
    pods = [
        _pod("2026-11-25T08:00:00Z", "2026-11-25T08:00:05Z", "2026-11-25T08:00:10Z"),
        _pod("2026-11-25T08:00:01Z", "2026-11-25T08:00:05Z", "2026-11-25T08:00:31Z"),
        _pod("2026-11-25T08:00:01Z", None, None),
    ]
    times = report.pod_times(pods)
    assert times.ready == 2
    assert times.p50 == 10.0 and times.p99 == 30.0
    assert times.last_ready == report.parse_time("2026-11-25T08:00:31Z")


def test_timeline_counts_cumulatively_per_step() -> None:
    start = report.parse_time("2026-11-25T08:00:00Z")
    claims = [{"metadata": {"creationTimestamp": "2026-11-25T08:00:03Z"}}]
    nodes = [{"metadata": {"creationTimestamp": "2026-11-25T08:00:12Z"}}]
    pods = [
        _pod("2026-11-25T08:00:00Z", "2026-11-25T08:00:14Z", "2026-11-25T08:00:16Z"),
        _pod("2026-11-25T08:00:00Z", "2026-11-25T08:00:14Z", "2026-11-25T08:00:25Z"),
    ]
    marked = [report.parse_time("2026-11-25T08:00:02Z"), report.parse_time("2026-11-25T08:00:11Z")]
    rows = report.timeline(start, claims, nodes, pods, step=10.0, marked=marked)
    assert rows == [
        {"t": 10.0, "created": 2, "marked": 1, "claims": 1, "nodes": 0, "scheduled": 0, "ready": 0},
        {"t": 20.0, "created": 2, "marked": 2, "claims": 1, "nodes": 1, "scheduled": 2, "ready": 1},
        {"t": 30.0, "created": 2, "marked": 2, "claims": 1, "nodes": 1, "scheduled": 2, "ready": 2},
    ]
    assert "marked" in report.timeline_text(rows)


# -- apiserver requests ------------------------------------------------------------------------------------------------


def _event(
    verb: str, resource: str, t: str, *, sub: str = "", code: int = 201, user: str = KARPY, name: str = "x", agent=""
) -> dict:
    ref = {"resource": resource, "name": name, "namespace": "default"}
    if sub:
        ref["subresource"] = sub
    return {
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user},
        "userAgent": agent,
        "objectRef": ref,
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": t,
    }


def test_count_writes_by_user_window_and_kind() -> None:
    events = [
        _event("create", "nodeclaims", "2026-11-25T08:00:01.5Z"),
        _event("create", "nodeclaims", "2026-11-25T08:00:02Z", code=409),  # a conflict: not a NodeClaim created
        _event("patch", "nodeclaims", "2026-11-25T08:00:02Z", sub="status", code=200),
        _event("create", "pods", "2026-11-25T08:00:03Z", sub="eviction"),
        _event("create", "pods", "2026-11-25T08:00:03Z", sub="binding"),
        _event("delete", "pods", "2026-11-25T08:00:04Z", code=200),
        _event("delete", "nodes", "2026-11-25T08:00:04Z", code=200),
        _event("get", "nodes", "2026-11-25T08:00:04Z", code=200),  # a read: not a write
        _event("create", "nodeclaims", "2026-11-25T08:00:04Z", user="system:serviceaccount:karpenter:karpenter"),
        _event("create", "nodeclaims", "2026-11-25T07:59:59Z"),  # before the window
        _event("create", "nodeclaims", "2026-11-25T08:00:10Z"),  # at its end (excluded)
    ]
    since, until = report.parse_time("2026-11-25T08:00:00Z"), report.parse_time("2026-11-25T08:00:10Z")
    assert report.count_writes(events, KARPY, since, until) == {
        "writes": 7,
        "nodeclaim_creates": 1,
        "evictions": 1,
        "pod_deletes": 1,
        "node_deletes": 1,
    }


def test_write_breakdown_per_verb_and_resource() -> None:
    events = [
        _event("create", "pods", "2026-11-25T08:00:01Z", sub="binding"),
        _event("create", "pods", "2026-11-25T08:00:02Z", sub="binding"),
        _event("patch", "nodeclaims", "2026-11-25T08:00:02Z", sub="status"),
        _event("get", "nodes", "2026-11-25T08:00:02Z"),
    ]
    assert report.write_breakdown(events, KARPY, 0.0) == {"create pods/binding": 2, "patch nodeclaims/status": 1}


SCHED = "kube-scheduler/v1.34.0 (linux/amd64) kubernetes/abc/scheduler"


def test_scheduler_writes_are_the_admin_users_with_a_kube_scheduler_agent() -> None:
    def sched(verb: str, resource: str, t: str, **kw: object) -> dict:
        return _event(verb, resource, t, user="admin", agent=SCHED, **kw)  # type: ignore[arg-type]

    events = [
        sched("create", "pods", "2026-11-25T08:00:01Z", sub="binding"),
        sched("create", "pods", "2026-11-25T08:00:01Z", sub="binding", code=409),  # lost a race: a write, no Binding
        sched("patch", "pods", "2026-11-25T08:00:02Z", sub="status", code=200),
        sched("create", "events", "2026-11-25T08:00:02Z"),
        _event("patch", "pods", "2026-11-25T08:00:02Z", sub="status", user="admin", agent="kwok/v0.7.0"),  # KWOK
        _event("create", "pods", "2026-11-25T08:00:02Z", sub="binding"),  # karpy's
        sched("create", "events", "2026-11-25T08:00:20Z"),  # after the window
    ]
    since, until = report.parse_time("2026-11-25T08:00:00Z"), report.parse_time("2026-11-25T08:00:10Z")
    assert report.scheduler_writes(events, since, until) == {"writes": 4, "bindings": 1, "status": 1, "events": 1}


def test_marked_times_are_each_pods_first_status_write_by_kube_scheduler() -> None:
    def status(name: str, t: str, **kw: object) -> dict:
        return _event("patch", "pods", t, sub="status", code=200, name=name, **kw)  # type: ignore[arg-type]

    events = [
        status("a", "2026-11-25T08:00:05Z", user="admin", agent=SCHED),
        status("a", "2026-11-25T08:00:03Z", user="admin", agent=SCHED),  # out of order: the earlier counts
        status("b", "2026-11-25T08:00:04Z", user="admin", agent=SCHED),
        status("c", "2026-11-25T08:00:01Z", user="admin", agent="kwok/v0.7.0"),  # KWOK's Running status: not a mark
        {**status("d", "2026-11-25T08:00:01Z", user="admin", agent=SCHED), "responseStatus": {"code": 409}},
    ]
    assert report.marked_times(events) == [
        report.parse_time("2026-11-25T08:00:03Z"),
        report.parse_time("2026-11-25T08:00:04Z"),
    ]


def test_count_requests_counts_each_request_once_reads_included() -> None:
    watch = _event("watch", "pods", "2026-11-25T08:00:01Z", code=200)
    events = [
        {**watch, "auditID": "w", "stage": "ResponseStarted"},
        {**watch, "auditID": "w", "stage": "ResponseComplete"},
        {**_event("list", "nodes", "2026-11-25T08:00:02Z", code=200), "auditID": "l"},
        {**_event("create", "nodeclaims", "2026-11-25T08:00:03Z"), "auditID": "c"},
        {**_event("get", "nodes", "2026-11-25T08:00:03Z", user="someone"), "auditID": "o"},
        {**_event("get", "nodes", "2026-11-25T08:00:30Z"), "auditID": "late"},
    ]
    since, until = report.parse_time("2026-11-25T08:00:00Z"), report.parse_time("2026-11-25T08:00:10Z")
    assert report.count_requests(events, KARPY, since, until) == 3
    assert next(e["stage"] for e in report.unique_events(events)) == "ResponseComplete"


def test_audit_policy_logs_reads_only_when_asked() -> None:
    from e2e.cluster.controlplane import KARPENTER_USER, audit_policy

    users = (KARPY, KARPENTER_USER)
    assert len(audit_policy(users)["rules"]) == 2  # type: ignore[arg-type]
    rules = audit_policy(users, reads=True)["rules"]
    assert rules[1] == {"level": "Metadata", "users": list(users), "verbs": ["get", "list", "watch"]}  # type: ignore[index]
    assert rules[-1] == {"level": "None"}  # type: ignore[index]


def test_audit_policy_logs_kube_schedulers_pod_writes_only_when_asked() -> None:
    from e2e.audit import ADMIN_USER
    from e2e.cluster.controlplane import audit_policy

    assert all(ADMIN_USER not in rule.get("users", []) for rule in audit_policy(reads=True)["rules"])  # type: ignore[attr-defined]
    rules = audit_policy(scheduler=True)["rules"]
    (rule,) = [r for r in rules if ADMIN_USER in r.get("users", [])]  # type: ignore[attr-defined]
    assert rule["verbs"] == ["create", "update", "patch"]
    assert {"group": "", "resources": ["pods/binding", "pods/status", "events"]} in rule["resources"]
    assert rules[-1] == {"level": "None"}  # type: ignore[index]


def test_hourly_cost_prices_each_node() -> None:
    assert report.hourly_cost({"a": 2, "b": 1, "unknown": 3}, {"a": 0.5, "b": 1.25}) == 2.25


# -- medians and the table ---------------------------------------------------------------------------------------------


def test_median_over_runs_skips_missing_values() -> None:
    runs = [{"total_s": 10.0, "down_s": None}, {"total_s": 30.0, "down_s": 40.0}, {"total_s": 20.0}]
    med = report.median_result(runs)
    assert med["total_s"] == 20.0
    assert med["down_s"] == 40.0
    assert med["nodes"] is None


def test_table_puts_both_side_by_side_with_the_ratio() -> None:
    karpy = [{"total_s": 20.0, "nodes": 10, "writes_per_pod": 1.5}]
    karpenter = [{"total_s": 40.0, "nodes": 8, "writes_per_pod": 3.0}, {"total_s": 60.0, "nodes": 8}]
    text = report.table({1000: {"karpy": karpy, "karpenter": karpenter}})
    lines = text.splitlines()
    assert lines[0].startswith("| pods | metric | karpy | Karpenter | karpy/Karpenter |")
    assert "| 1,000 | all Running (s) | 20.0 | 50.0 | 0.40 |" in lines
    assert "| 1,000 | nodes | 10 | 8 | 1.25 |" in lines
    assert "| 1,000 | writes per pod | 1.50 | 3.00 | 0.50 |" in lines
    assert "| 1,000 | scale-down to nothing (s) | — | — | — |" in lines
    assert len(lines) == 2 + len(report.METRICS)


def test_scheduler_qps_is_kube_schedulers_default_unless_the_benchmark_lifts_it(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from e2e.cluster.controlplane import SCHEDULER_QPS_ENV, ControlPlane

    plane = ControlPlane(workdir=tmp_path, bindir=tmp_path)  # type: ignore[arg-type]
    spawned: list[list[str]] = []
    monkeypatch.setattr(plane, "_spawn", lambda name, args, env=None: spawned.append(args))
    monkeypatch.delenv(SCHEDULER_QPS_ENV, raising=False)
    plane._start_scheduler(1234)
    assert not any(a.startswith("--kube-api-") for a in spawned[-1])
    monkeypatch.setenv(SCHEDULER_QPS_ENV, "500")
    plane._start_scheduler(1234)
    assert {"--kube-api-qps=500", "--kube-api-burst=1000"} <= set(spawned[-1])


# -- karpy's runtime virtualenv (benchmarks/live/runtime.py) --------------------------------------------------


def _fake_venv(venv: Path, pyproject: Path) -> None:
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / runtime.STAMP).write_text(runtime.stamp_of(pyproject))


def test_runtime_venv_is_current_only_for_the_pyproject_it_was_made_from(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "karpy"\ndependencies = ["attrs"]\n')
    venv = tmp_path / "venv"
    assert not runtime.is_current(venv, pyproject)
    _fake_venv(venv, pyproject)
    assert runtime.is_current(venv, pyproject)
    pyproject.write_text('[project]\nname = "karpy"\ndependencies = ["attrs", "structlog"]\n')
    assert not runtime.is_current(venv, pyproject), "a changed dependency list makes it again"
    _fake_venv(tmp_path / "other", pyproject)
    (tmp_path / "other" / "bin" / "python").unlink()
    assert not runtime.is_current(tmp_path / "other", pyproject), "no interpreter, not current"


def test_runtime_python_keeps_a_current_venv(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "karpy"\n')
    venv = tmp_path / "venv"
    _fake_venv(venv, tmp_path / "pyproject.toml")
    # A current venv is used as it is: no venv or pip run (neither could work on the fake interpreter).
    assert runtime.runtime_python(tmp_path, venv) == venv / "bin" / "python"


def test_karpy_process_runs_the_interpreter_it_was_given(tmp_path: Path) -> None:
    argv_file = tmp_path / "argv"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$@" > {argv_file}\n')
    fake.chmod(0o755)
    karpy = KarpyProcess({}, tmp_path / "karpy.log", python=str(fake))
    sibling = karpy.sibling("standby")
    assert sibling.python == str(fake)
    assert KarpyProcess({}, tmp_path / "x.log").python == sys.executable
    karpy.start()
    assert karpy.proc is not None
    assert karpy.proc.wait(10) == 0
    assert argv_file.read_text().split() == ["-m", "karpy", "run"]
