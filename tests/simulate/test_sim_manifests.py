"""Reading manifests: workload expansion as the controllers would do it, API defaulting, invalid input."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_helpers import CATALOGUE, deployment, nodeclass, nodepool, pod_spec, run, write

from karpy.scheduling.translate import scheduling_pod
from karpy.simulate.defaulting import safe_encode
from karpy.simulate.manifests import collect
from karpy.simulate.reading import parse_documents, read_sources
from karpy.simulate.validation import ManifestError

SAFE = "[bcdfghjklmnpqrstvwxz2456789]"


def _collect(*objs: dict[str, Any], scale: dict[str, int] | None = None) -> Any:
    return collect(parse_documents(yaml.safe_dump_all(objs), "test.yaml"), scale)


def _names(manifests: Any) -> list[str]:
    return [p["metadata"]["name"] for p in manifests.pods]


def test_deployment_pods_are_named_like_the_replicaset_controller_names_them() -> None:
    m = _collect(deployment("web", 3))
    names = _names(m)
    assert len(names) == 3 and len(set(names)) == 3
    for name in names:
        assert re.fullmatch(rf"web-{SAFE}{{6,10}}-{SAFE}{{5}}", name), name
    pod = m.pods[0]
    rs = pod["metadata"]["ownerReferences"][0]
    assert rs["kind"] == "ReplicaSet" and rs["controller"] is True
    assert name.startswith(rs["name"] + "-")
    assert pod["metadata"]["labels"] == {"app": "web", "pod-template-hash": rs["name"].removeprefix("web-")}
    assert scheduling_pod(pod).owner == f"ReplicaSet/{rs['uid']}"
    # Reproducible: the same manifests give the same names.
    assert _names(_collect(deployment("web", 3))) == names


def test_replicas_default_to_one_and_scale_overrides() -> None:
    assert len(_collect(deployment("web", None)).pods) == 1
    assert len(_collect(deployment("web", 0)).pods) == 0
    assert len(_collect(deployment("web", 0), scale={"web": 4}).pods) == 4
    assert len(_collect(deployment("web", 0), scale={"default/web": 2}).pods) == 2
    with pytest.raises(ManifestError, match="--scale nope: no Deployment"):
        _collect(deployment("web", 0), scale={"nope": 1})


def test_replicaset_pods() -> None:
    rs = deployment("front", 2)
    rs["kind"] = "ReplicaSet"
    names = _names(_collect(rs))
    assert all(re.fullmatch(rf"front-{SAFE}{{5}}", n) for n in names)


def test_statefulset_pods_and_claims() -> None:
    sts = deployment("db", 3)
    sts["kind"] = "StatefulSet"
    sts["spec"]["volumeClaimTemplates"] = [
        {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}
    ]
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "gp3", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    m = _collect(sts, sc)
    assert _names(m) == ["db-0", "db-1", "db-2"]
    assert m.pods[1]["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "db-1"
    assert m.pods[1]["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"
    assert [c["metadata"]["name"] for c in m.claims] == ["data-db-0", "data-db-1", "data-db-2"]
    assert m.claims[0]["spec"]["storageClassName"] == "gp3"
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-2"}} in m.pods[2]["spec"]["volumes"]


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": "jobs"},
        "spec": {"template": {"spec": pod_spec(restartPolicy="Never")}, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        ({}, 1),
        ({"parallelism": 4}, 4),
        ({"parallelism": 4, "completions": 2}, 2),
        ({"parallelism": 2, "completions": 10}, 2),
        ({"parallelism": 3, "suspend": True}, 0),
    ],
)
def test_job_runs_min_of_parallelism_and_completions(spec: dict[str, Any], count: int) -> None:
    m = _collect(_job(**spec))
    assert len(m.pods) == count
    for pod in m.pods:
        assert pod["metadata"]["namespace"] == "jobs"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "batch"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_indexed_job_names_carry_the_index() -> None:
    m = _collect(_job(parallelism=2, completionMode="Indexed"))
    assert [re.sub(rf"-{SAFE}{{5}}$", "", n) for n in _names(m)] == ["batch-0", "batch-1"]
    assert m.pods[1]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"


def test_api_defaulting_requests_from_limits_priority_and_namespace() -> None:
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "priorityClassName": "high",
            "containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}}}],
        },
    }
    m = _collect(pc, pod)
    model = scheduling_pod(m.pods[0])
    assert model.namespace == "default"
    assert model.priority == 1000
    assert model.requests["cpu"] == 2000 and model.requests["nvidia.com/gpu"] == 1


def test_null_requests_are_no_requests_and_default_from_limits() -> None:
    """``resources: {requests: null, limits: …}`` (kubectl apply keeps the null; the apiserver drops it) requests
    the limits, as for absent requests — not a crash."""
    container = {"name": "c", "resources": {"requests": None, "limits": {"cpu": "1"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [container]}}
    model = scheduling_pod(_collect(pod).pods[0])
    assert model.requests["cpu"] == 1000


def test_unknown_kinds_are_counted_not_fatal() -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    assert _collect(svc, deployment("web", 1)).ignored == {"Service": 1}


def test_list_objects_are_flattened() -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [deployment("a", 1), deployment("b", 1)]})
    assert len(collect(parse_documents(text, "list.yaml")).pods) == 2


def test_stdin_and_directories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", deployment("a", 1), name="a.yaml")
    write(tmp_path, deployment("b", 1), name="b.yml")
    (tmp_path / "notes.txt").write_text("not a manifest")
    stdin = io.StringIO(yaml.safe_dump(deployment("c", 1)))
    docs = read_sources([str(tmp_path), "-"], stdin)
    assert sorted(d.name for d in docs) == ["a", "b", "c"]


def test_safe_encode_matches_kubernetes_alphabet() -> None:
    # Kubernetes SafeEncodeString maps ASCII digits 0-9 onto "45679bcdf" + ... ('0' is 48, 48 % 27 = 21 -> '4').
    assert safe_encode("0123456789") == "456789bcdf"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [unclosed", "invalid YAML (line 1)"),
        ("- just\n- a list\n", "expected a Kubernetes object (a mapping), got list"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {}\n", "Pod without metadata.name"),
        ("kind: Pod\nmetadata: {name: x}\n", "missing apiVersion"),
    ],
)
def test_invalid_documents(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        parse_documents(text, "bad.yaml")


def _bad_quantity() -> dict[str, Any]:
    d = deployment("web", 1)
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    return d


def _bad_operator() -> dict[str, Any]:
    return nodepool(requirements=[{"key": "kubernetes.io/arch", "operator": "Is", "values": ["amd64"]}])


def _bad_gt() -> dict[str, Any]:
    return nodepool(requirements=[{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["x"]}])


def _bad_replicas() -> dict[str, Any]:
    return deployment("web", -1)


def _bad_job() -> dict[str, Any]:
    return _job(parallelism="two")


def _duplicate() -> list[dict[str, Any]]:
    return [deployment("web", 1), deployment("web", 2)]


def _unknown_priority() -> dict[str, Any]:
    d = deployment("web", 1)
    d["spec"]["template"]["spec"]["priorityClassName"] = "missing"
    return d


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (_bad_quantity, "resources.requests: invalid quantity 'lots'"),
        (_bad_operator, "kubernetes.io/arch: unknown operator 'Is'"),
        (_bad_gt, "instance-cpu Gt needs exactly one integer value"),
        (_bad_replicas, "spec.replicas must be a non-negative integer, got -1"),
        (_bad_job, "spec.parallelism must be a non-negative integer, got 'two'"),
        (_duplicate, "duplicate Deployment default/web (first in test.yaml#1)"),
        (_unknown_priority, "priorityClassName 'missing' not found"),
    ],
)
def test_invalid_objects(build: Any, message: str) -> None:
    objs = build()
    with pytest.raises(ManifestError, match=re.escape(message)):
        _collect(*(objs if isinstance(objs, list) else [objs]))


def test_cli_exit_codes_on_invalid_input(tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed")
    code, out, err = run(capsys, "-f", str(bad), "--catalogue", CATALOGUE)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"karpy simulate: {bad}: invalid YAML")
    code, _, err = run(capsys, "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file or directory" in err
    code, _, err = run(capsys, "-f", write(tmp_path, deployment("web", 1)), "--region", "mars-north-1")
    assert code == 2 and "no built-in catalogue for region 'mars-north-1'" in err
    code, _, err = run(capsys, "-f", write(tmp_path, deployment("web", 1)), "--scale", "web=lots")
    assert code == 2 and "expected [NAMESPACE/]NAME=N" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "-f", str(empty))
    assert code == 2 and "no *.yaml, *.yml or *.json files" in err


def test_cli_exit_codes_on_invalid_catalogue(tmp_path: Path, capsys: Any) -> None:
    manifests = write(tmp_path, nodeclass(), nodepool(), deployment("web", 1))
    cases = {
        "not json": "invalid JSON",
        '{"types": []}': 'expected an object with a non-empty "instanceTypes" list',
        '{"instanceTypes": [{"name": "x", "capacity": {"cpu": "two"}, "offerings": []}]}': "invalid quantity 'two'",
        '{"instanceTypes": [{"name": "x", "capacity": {"cpu": "2"}, "offerings": [{"zone": "a"}]}]}': '"price" must be',
        '{"instanceTypes": [{"name": "x", "capacity": {"cpu": "2"}, "offerings": [{"zone": "a", "price": 1,'
        ' "capacityType": "cheap"}]}]}': "capacityType must be one of",
    }
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"cat{i}.json"
        path.write_text(text)
        code, _, err = run(capsys, "-f", manifests, "--catalogue", str(path))
        assert code == 2, text
        assert message in err and err.startswith(f"karpy simulate: {path}"), err


def test_generate_name_gets_a_reproducible_suffix() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {generateName: worker-}\nspec: {containers: []}\n"
    first, again = parse_documents(text, "x.yaml"), parse_documents(text, "x.yaml")
    assert re.fullmatch(rf"worker-{SAFE}{{5}}", first[0].name) and first[0].name == again[0].name


def test_thousands_of_replicas_get_distinct_names() -> None:
    names = _names(_collect(deployment("big", 6000)))
    assert len(set(names)) == 6000
