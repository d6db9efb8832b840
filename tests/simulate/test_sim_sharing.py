"""What ``karpy simulate`` shares between a workload's replicas (one admitted template spec, one translation), and
the garbage-collector pause around reading and planning: sharing must never leak one pod's state into another."""

from __future__ import annotations

import gc
from typing import Any

import attrs
import pytest
import yaml
from sim_helpers import deployment

from karpy.scheduling import gcpause
from karpy.scheduling.translate import SpecMemo, scheduling_pod
from karpy.simulate.manifests import collect
from karpy.simulate.reading import parse_documents
from karpy.simulate.validation import ManifestError


def _collect(*objs: dict[str, Any], scale: dict[str, int] | None = None) -> Any:
    return collect(parse_documents(yaml.safe_dump_all(objs), "test.yaml"), scale)


def _statefulset(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "db", "image": "x", "resources": {"limits": {"cpu": "1"}}}],
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                },
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"resources": {}}}],
        },
    }


def test_replicas_share_one_admitted_spec_and_own_their_metadata() -> None:
    doc = deployment("web", 3)
    doc["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    m = _collect(doc)
    a, b, c = m.pods
    assert a["spec"] is b["spec"] is c["spec"]
    # Admitted once, on the shared copy: requests defaulted from limits (what every replica would get).
    assert a["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "1Gi"}
    # The workload's own template is left as written (CapacityBuffers read it).
    template = m.scalables["Deployment"]["default/web"]["spec"]["template"]
    assert "requests" not in template["spec"]["containers"][0]["resources"]
    assert template["spec"] is not a["spec"]
    for field in ("labels", "annotations", "ownerReferences"):
        assert a["metadata"][field] is not b["metadata"][field]
    a["metadata"]["labels"]["extra"] = "1"
    assert "extra" not in b["metadata"]["labels"]


def test_invalid_template_fails_once_with_the_workload_and_zero_replicas_are_not_admitted() -> None:
    bad = deployment("web", 2, cpu="lots")
    with pytest.raises(ManifestError, match=r"test.yaml#1 \(Deployment default/web\)"):
        _collect(bad)
    _collect(deployment("web", 0, cpu="lots"))  # no pod, nothing admitted, as before


def test_statefulset_replicas_get_their_own_volumes() -> None:
    m = _collect(_statefulset("db", 2))
    a, b = m.pods
    assert a["spec"] is not b["spec"] and a["spec"]["volumes"] is not b["spec"]["volumes"]
    assert [v["name"] for v in a["spec"]["volumes"]] == ["scratch", "data"]
    assert a["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] == "data-db-0"
    assert b["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] == "data-db-1"
    assert a["spec"]["containers"] is b["spec"]["containers"]  # the rest is shared


def test_translation_memo_shares_only_immutable_fields() -> None:
    m = _collect(deployment("web", 2, topologySpreadConstraints=[_spread("web")]))
    memo: SpecMemo = {}
    p, q = (scheduling_pod(o, memo) for o in m.pods)
    assert len(memo) == 1
    assert (p.name, p.uid) != (q.name, q.uid)
    assert p.topology_spread is q.topology_spread  # tuples of frozen values: shared
    assert p.requests == q.requests and p.requests is not q.requests
    assert p.node_selector is not q.node_selector and p.labels is not q.labels
    # Identical to translating each pod on its own.
    assert [p, q] == [scheduling_pod(o) for o in m.pods]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.requests = {}  # type: ignore[misc]


def test_same_named_workloads_with_different_templates_are_not_merged() -> None:
    small = deployment("web", 2, namespace="a", cpu="100m")
    large = deployment("web", 2, namespace="b", cpu="3")
    m = _collect(small, large)
    memo: SpecMemo = {}
    pods = [scheduling_pod(o, memo) for o in m.pods]
    assert len(memo) == 2
    assert [(p.namespace, p.requests["cpu"]) for p in pods] == [("a", 100), ("a", 100), ("b", 3000), ("b", 3000)]
    # Equal templates in two documents are two workloads too: same requests, their own pods and owners.
    twin = _collect(deployment("web", 1, namespace="a"), deployment("web", 1, namespace="b"))
    assert len({scheduling_pod(o).owner for o in twin.pods}) == 2


def test_memo_entry_of_a_dead_spec_is_not_reused() -> None:
    memo: SpecMemo = {}
    first = {"metadata": {"name": "a"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}}
    scheduling_pod(first, memo)
    key = id(first["spec"])
    # A different spec that happens to get the same id (the first was freed) must be translated afresh.
    memo[key] = ({"containers": []}, memo[key][1])
    other = {"metadata": {"name": "b"}, "spec": first["spec"]}
    assert scheduling_pod(other, memo).requests["cpu"] == 1000


def test_ephemeral_volume_claims_are_named_per_pod() -> None:
    eph = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    m = _collect(deployment("web", 2, volumes=[eph]))
    memo: SpecMemo = {}
    claims = [scheduling_pod(o, memo).volume_claims for o in m.pods]
    assert claims == [(f"{o['metadata']['name']}-scratch",) for o in m.pods]


def _spread(app: str) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
    }


def test_gc_pause_restores_the_collector() -> None:
    assert gc.isenabled()
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not resume it
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gcpause.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_gc_pause_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with gcpause.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collect_runs_paused() -> None:
    seen: list[bool] = []

    def docs() -> Any:
        seen.append(gc.isenabled())
        yield from parse_documents(yaml.safe_dump(deployment("web", 1)), "t.yaml")

    collect(docs())
    assert seen == [False] and gc.isenabled()
