"""Pod JSON → scheduling model: pod (anti-)affinity, topology spread and volumes (``karpy.scheduling.translate``)."""

from __future__ import annotations

from karpy.scheduling.model import LabelSelector, PodAffinityTerm, Requirement, TopologySpreadConstraint
from karpy.scheduling.translate import scheduling_pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def test_pod_affinity_terms_are_parsed() -> None:
    obj = {
        "metadata": {"name": "p", "namespace": "web", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c"}],
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": ZONE,
                            "labelSelector": {
                                "matchLabels": {"app": "db"},
                                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
                            },
                            "namespaces": ["data"],
                            "namespaceSelector": {"matchLabels": {"team": "x"}},
                            "matchLabelKeys": ["pod-template-hash"],
                        }
                    ]
                },
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 30, "podAffinityTerm": {"topologyKey": HOST, "labelSelector": {}}}
                    ]
                },
            },
        },
    }
    pod = scheduling_pod(obj)
    assert pod.pod_affinity == (
        PodAffinityTerm(
            ZONE,
            LabelSelector((("app", "db"),), (Requirement("tier", "In", ("a", "b")),)),
            ("data",),
            LabelSelector((("team", "x"),)),
            ("pod-template-hash",),
        ),
    )
    assert pod.pod_anti_affinity == ()
    assert pod.preferred_pod_anti_affinity == (PodAffinityTerm(HOST, LabelSelector(), weight=30),)


def test_topology_spread_defaults_and_fields() -> None:
    obj = {
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {
            "containers": [{"name": "c"}],
            "topologySpreadConstraints": [
                {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"},
                {
                    "maxSkew": 1,
                    "topologyKey": HOST,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "x"}},
                    "minDomains": 3,
                    "nodeAffinityPolicy": "Ignore",
                    "nodeTaintsPolicy": "Honor",
                    "matchLabelKeys": ["pod-template-hash"],
                },
            ],
        },
    }
    assert scheduling_pod(obj).topology_spread == (
        TopologySpreadConstraint(ZONE, 2, "ScheduleAnyway", None),
        TopologySpreadConstraint(
            HOST, 1, "DoNotSchedule", LabelSelector((("app", "x"),)), 3, "Ignore", "Honor", ("pod-template-hash",)
        ),
    )


def test_volume_claims_include_generic_ephemeral_volumes() -> None:
    obj = {
        "metadata": {"name": "db-0", "namespace": "d"},
        "spec": {
            "containers": [{"name": "c"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "cfg", "configMap": {"name": "x"}},
            ],
        },
    }
    assert scheduling_pod(obj).volume_claims == ("data-db-0", "db-0-scratch")
