"""Builders for ``karpy simulate`` tests: manifests as YAML text, runs of the CLI with captured output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from karpy.cli.main import main

DATA = Path(__file__).parent / "data"
CATALOGUE = str(DATA / "catalogue.json")


def nodeclass(name: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def nodepool(
    name: str = "default",
    *,
    requirements: list[dict[str, Any]] | None = None,
    nodeclass: str = "default",
    weight: int | None = None,
    limits: dict[str, Any] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "requirements": requirements
                if requirements is not None
                else [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
                **({"taints": taints} if taints else {}),
            }
        }
    }
    if weight is not None:
        spec["weight"] = weight
    if limits is not None:
        spec["limits"] = limits
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def pod_spec(cpu: str = "1", memory: str = "1Gi", **extra: Any) -> dict[str, Any]:
    return {
        "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        **extra,
    }


def deployment(name: str, replicas: int | None, *, namespace: str = "default", **spec_extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(**spec_extra)},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def write(tmp_path: Path, *objs: dict[str, Any], name: str = "manifests.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objs))
    return str(path)


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys: Any, *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--output", "json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result
