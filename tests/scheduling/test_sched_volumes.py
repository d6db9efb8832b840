"""Volume topology from PV/PVC/StorageClass JSON (Karpenter ``VolumeTopology``), then through the engine."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from sched_builders import nodepool, requirement_map

from karpy.scheduling.model import Requirement
from karpy.scheduling.scheduler import solve
from karpy.scheduling.translate import scheduling_pod
from karpy.scheduling.volumes import VolumeTopology, volume_topology

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def pod(*volumes: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "db-0", "namespace": "d", "uid": "u"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], "volumes": list(volumes)},
    }


def pvc_vol(name: str) -> dict[str, Any]:
    return {"name": name, "persistentVolumeClaim": {"claimName": name}}


def pvc(name: str, *, volume: str | None = None, sc: str | None = "gp3") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if volume:
        spec["volumeName"] = volume
    if sc:
        spec["storageClassName"] = sc
    return {"metadata": {"name": name, "namespace": "d"}, "spec": spec}


def pv(name: str, terms: list[list[tuple[str, str, list[str]]]], **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            **extra,
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in t]} for t in terms
                    ]
                }
            },
        },
    }


def sc(
    name: str, mode: str = "WaitForFirstConsumer", zones: list[str] | None = None, default: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": name}, "volumeBindingMode": mode}
    if default:
        out["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if zones:
        out["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return out


def zin(*zones: str) -> Requirement:
    return Requirement(ZONE, "In", zones)


CLASSES = {"gp3": sc("gp3", zones=["us-east-1a", "us-east-1b"]), "plain": sc("plain"), "now": sc("now", "Immediate")}


@pytest.mark.parametrize(
    ("volumes", "pvcs", "pvs", "expected"),
    [
        # no volumes
        ([], [], [], VolumeTopology()),
        # bound zonal PV (EBS CSI key normalised)
        (
            [pvc_vol("data")],
            [pvc("data", volume="pv-1")],
            [pv("pv-1", [[("topology.ebs.csi.aws.com/zone", "In", ["us-east-1c"])]])],
            VolumeTopology(terms=((zin("us-east-1c"),),)),
        ),
        # ORed PV terms stay alternatives
        (
            [pvc_vol("data")],
            [pvc("data", volume="pv-1")],
            [pv("pv-1", [[(ZONE, "In", ["us-east-1a"])], [(ZONE, "In", ["us-east-1b"])]])],
            VolumeTopology(terms=((zin("us-east-1a"),), (zin("us-east-1b"),))),
        ),
        # local volume: hostname requirement dropped, zone kept
        (
            [pvc_vol("data")],
            [pvc("data", volume="pv-1")],
            [pv("pv-1", [[(HOST, "In", ["ip-1"]), (ZONE, "In", ["us-east-1a"])]], local={"path": "/mnt"})],
            VolumeTopology(terms=((zin("us-east-1a"),),)),
        ),
        # unbound WaitForFirstConsumer: allowedTopologies
        ([pvc_vol("data")], [pvc("data")], [], VolumeTopology(terms=((zin("us-east-1a", "us-east-1b"),),))),
        # unbound WaitForFirstConsumer without allowedTopologies: unconstrained
        ([pvc_vol("data")], [pvc("data", sc="plain")], [], VolumeTopology()),
        # two volumes: crossed
        (
            [pvc_vol("a"), pvc_vol("b")],
            [pvc("a"), pvc("b", volume="pv-b")],
            [pv("pv-b", [[(ZONE, "In", ["us-east-1b"])]])],
            VolumeTopology(terms=((zin("us-east-1a", "us-east-1b"), zin("us-east-1b")),)),
        ),
        # ephemeral volume before its PVC exists: the template's class
        (
            [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}}],
            [],
            [],
            VolumeTopology(terms=((zin("us-east-1a", "us-east-1b"),),)),
        ),
        # errors
        ([pvc_vol("data")], [], [], VolumeTopology(error='persistentvolumeclaim "d/data" not found')),
        (
            [pvc_vol("data")],
            [pvc("data", volume="gone")],
            [],
            VolumeTopology(error='persistentvolume "gone" not found'),
        ),
        (
            [pvc_vol("data")],
            [pvc("data", sc="now")],
            [],
            VolumeTopology(error='persistentvolumeclaim "d/data" is unbound and storageclass "now" binds Immediate'),
        ),
        (
            [pvc_vol("data")],
            [pvc("data", sc="nope")],
            [],
            VolumeTopology(error='storageclass "nope" of persistentvolumeclaim "d/data" not found'),
        ),
    ],
)
def test_volume_topology(
    volumes: list[dict[str, Any]], pvcs: list[dict[str, Any]], pvs: list[dict[str, Any]], expected: VolumeTopology
) -> None:
    got = volume_topology(
        pod(*volumes),
        {f"d/{c['metadata']['name']}": c for c in pvcs},
        {v["metadata"]["name"]: v for v in pvs},
        CLASSES,
    )
    assert got == expected


def test_default_storage_class_applies_to_claims_without_one() -> None:
    classes = {**CLASSES, "fast": sc("fast", zones=["us-east-1c"], default=True)}
    got = volume_topology(pod(pvc_vol("data")), {"d/data": pvc("data", sc=None)}, {}, classes)
    assert got.terms == ((zin("us-east-1c"),),)


def test_engine_places_the_pod_in_its_volume_zone() -> None:
    obj = pod(pvc_vol("data"))
    topo = volume_topology(
        obj, {"d/data": pvc("data", volume="pv")}, {"pv": pv("pv", [[(ZONE, "In", ["us-east-1b"])]])}, {}
    )
    p = attrs.evolve(scheduling_pod(obj), volume_terms=topo.terms)
    (claim,) = solve([p], [nodepool()], [], []).new_nodeclaims
    assert requirement_map(claim.requirements)[ZONE] == ("In", ("us-east-1b",))
