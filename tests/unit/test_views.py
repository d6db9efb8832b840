"""Pod views: effective requests (Kubernetes PodRequests) and provisionability (Karpenter IsProvisionable)."""

from __future__ import annotations

from typing import Any

from karpy.scheduling.translate import pod_requests
from karpy.state.views import pod_info


def container(cpu: str, mem: str, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}, **extra}


def test_requests_sum_containers_plus_overhead() -> None:
    """Containers add up; RuntimeClass overhead is added on top; one pod slot."""
    spec = {"containers": [container("1", "1Gi"), container("500m", "512Mi")], "overhead": {"cpu": "100m"}}
    assert pod_requests(spec) == {"cpu": 1600, "memory": 3 * 2**29, "pods": 1}


def test_largest_init_container_wins() -> None:
    """An init container larger than the app containers sets the request."""
    spec = {"initContainers": [container("4", "1Gi")], "containers": [container("1", "2Gi")]}
    assert pod_requests(spec) == {"cpu": 4000, "memory": 2 * 2**30, "pods": 1}


def test_sidecars_add_to_containers_and_later_inits() -> None:
    """Restartable init containers (sidecars) run alongside everything started after them."""
    spec = {
        "initContainers": [container("1", "1Gi", restartPolicy="Always"), container("2", "1Gi")],
        "containers": [container("1", "1Gi")],
    }
    # init peak: sidecar 1 + init 2 = 3 cpu; steady: sidecar 1 + app 1 = 2 cpu
    assert pod_requests(spec) == {"cpu": 3000, "memory": 2 * 2**30, "pods": 1}


def pod(conditions: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "d", "uid": "u", "resourceVersion": "1"},
        "spec": {"containers": [container("1", "1Gi")], **spec},
        "status": {"phase": "Pending", "conditions": conditions},
    }


UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def test_provisionable() -> None:
    """Only unschedulable, unbound, non-DaemonSet pods are provisioned for."""
    assert pod_info(pod(UNSCHEDULABLE)).provisionable
    assert not pod_info(pod([])).provisionable
    assert not pod_info(pod(UNSCHEDULABLE, nodeName="n1")).provisionable
    ds = pod(UNSCHEDULABLE)
    ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "x", "uid": "1", "controller": True}]
    assert not pod_info(ds).provisionable


def test_node_info_keeps_annotations_for_do_not_disrupt() -> None:
    """A Node's karpenter.sh/do-not-disrupt annotation reaches disruption's candidate filter through the view."""
    from karpy.controllers.disruption.candidates import node_annotations
    from karpy.state.views import node_info

    info = node_info({"metadata": {"name": "n", "annotations": {"karpenter.sh/do-not-disrupt": "true"}}})
    assert node_annotations(info) == {"karpenter.sh/do-not-disrupt": "true"}
    assert node_info({"metadata": {"name": "bare"}}).annotations == {}


def test_node_resources_are_canonical_and_empty_when_a_quantity_is_invalid() -> None:
    """Cluster state and ``karpy simulate`` read a Node's allocatable/capacity through the same translation."""
    from karpy.scheduling.translate import node_resources
    from karpy.state.views import node_info

    node = {
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "1900m", "memory": "7Gi"}, "capacity": {"cpu": "2", "pods": "29"}},
    }
    assert node_resources(node) == ({"cpu": 1900, "memory": 7 * 2**30}, {"cpu": 2000, "pods": 29})
    assert (node_info(node).allocatable, node_info(node).capacity) == node_resources(node)
    broken = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "lots"}, "capacity": {"cpu": "2"}}}
    assert node_resources(broken) == ({}, {})
